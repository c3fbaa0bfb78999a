package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
	"github.com/clustergateway/cluster-gateway/internal/testmetrics"
	"github.com/clustergateway/cluster-gateway/internal/testproc"
)

// Gateway metrics of its konnectivity client. Those of one proxy-server
// have a label server="host:port" (see perServer); Samples.Sum adds them up.
const (
	kProxyConns     = "cluster_gateway_konnectivity_proxy_connections"
	kOpenTunnels    = "cluster_gateway_konnectivity_open_tunnels"
	kTunnelUp       = "cluster_gateway_konnectivity_tunnel_up"
	kBuilds         = "cluster_gateway_konnectivity_tunnel_builds_total"
	kBuildFailures  = "cluster_gateway_konnectivity_tunnel_build_failures_total"
	kHealthFailures = "cluster_gateway_konnectivity_health_check_failures_total"
	kRotations      = "cluster_gateway_konnectivity_rotations_total"
	// Manager-wide, no label.
	kDials        = "cluster_gateway_konnectivity_dial_duration_seconds_count"
	kDialFailures = "cluster_gateway_konnectivity_dial_failures_total"
	kFailovers    = "cluster_gateway_konnectivity_dial_failovers_total"
	kRejected     = "cluster_gateway_konnectivity_rejected_reloads_total"
)

// perServer is the sample of a per-proxy-server metric for p.
func perServer(m testmetrics.Samples, name string, p *localenv.ProxyServer) float64 {
	return m[fmt.Sprintf("%s{server=%q}", name, p.Address())]
}

// serversSum adds a metric of the proxy-servers' own /metrics over all that run.
func serversSum(t *testing.T, k *localenv.Konnectivity, name string) float64 {
	t.Helper()
	sum := 0.0
	for _, p := range k.Servers {
		if !p.Process.Exited() {
			sum += mustScrape(t, p.MetricsURL).Sum(name)
		}
	}
	return sum
}

// requireKonnectivity returns the proxy-server and agent that the suite's
// environment always starts (it never sets NoKonnectivity).
func requireKonnectivity(t *testing.T) *localenv.Konnectivity {
	t.Helper()
	requireGateway(t)
	if env.Konnectivity == nil {
		t.Fatal("the environment runs no konnectivity proxy-server and agent, which the suite always starts")
	}
	return env.Konnectivity
}

// mustScrape reads a Prometheus text endpoint that needs no credentials
// (the proxy-server's and the agent's).
func mustScrape(t *testing.T, url string) testmetrics.Samples {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	m, err := testmetrics.Scrape(c, url)
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	return m
}

// tcpConns counts the ESTABLISHED TCP connections that process pid holds
// to ip:port: the kernel's view, independent of what the process reports
// about itself.
func tcpConns(t *testing.T, pid int, ip string, port int) int {
	t.Helper()
	n, err := testproc.TCPConns(pid, ip, port)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// proxyServerConns is the kernel's count of the gateway's connections to
// the proxy-servers.
func proxyServerConns(t *testing.T, k *localenv.Konnectivity) int {
	t.Helper()
	n := 0
	for _, p := range k.Servers {
		n += proxyServerConnsTo(t, p)
	}
	return n
}

// proxyServerConnsTo is the kernel's count of them to p.
func proxyServerConnsTo(t *testing.T, p *localenv.ProxyServer) int {
	t.Helper()
	return tcpConns(t, env.Gateway.Process.Pid(), "127.0.0.1", p.ServerPort)
}

// konnectivityNamespace creates a namespace on the cluster behind the agent,
// directly (not through the gateway), deleted when the test ends.
func konnectivityNamespace(t *testing.T, k *localenv.Konnectivity) (kubernetes.Interface, string) {
	t.Helper()
	direct, err := kubernetes.NewForConfig(k.Cluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ns := uniqueName(t, "konn")
	if _, err := direct.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = direct.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	return direct, ns
}

// proxyPath is a path on cluster name through the hub and the gateway.
func proxyPath(name, sub string) string {
	return "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/" + name + "/proxy" + sub
}

// expectOK sends one GET through the hub to cluster name and fails unless it is 200.
func expectOK(t *testing.T, name string) {
	t.Helper()
	if code, body := hubGet(t, proxyPath(name, "/api/v1/namespaces/default")); code != http.StatusOK {
		t.Fatalf("GET through the gateway to %s: %d %s", name, code, body)
	}
}
