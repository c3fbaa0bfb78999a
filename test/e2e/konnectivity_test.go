package e2e

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/clustergateway/cluster-gateway/internal/testproc"
)

// Konnectivity tests reach the cluster behind the agent (cluster-3 on
// 127.0.0.4) through the real hub, the gateway, the proxy-server and the
// agent. They read counters of all three and need them undisturbed, so
// none of them runs in parallel.

// TestKonnectivityKubectlThroughAgent runs `kubectl get -w` and `kubectl
// exec` (WebSocket and SPDY) through the hub to cluster-3, and proves every
// connection went through the agent: 127.0.0.4 is loopback, so the gateway
// COULD dial it; the kernel shows it holds no connection to it while the
// agent does, and the gateway's, proxy-server's and agent's dial counters
// grow by the same amount, at least one per exec.
func TestKonnectivityKubectlThroughAgent(t *testing.T) {
	k := requireKonnectivity(t)
	c := k.Cluster
	direct, ns := konnectivityNamespace(t, k)
	expectOK(t, c.GatewayName) // the first request waits for nothing below
	dials := func() (gw, server, agent float64) {
		return gatewayMetrics(t)[kDials], serversSum(t, k, "konnectivity_network_proxy_server_dial_duration_seconds_count"),
			mustScrape(t, k.AgentMetricsURL).Sum("konnectivity_network_proxy_agent_dial_duration_seconds_count")
	}
	gw0, server0, agent0 := dials()
	dialFailures0 := gatewayMetrics(t)[kDialFailures]

	w := startKubectl(t, c.ViaHubKubeconfig, nil, "get", "configmaps", "-n", ns, "-w", "-o", "name")
	createConfigMap(t, direct, ns, "first")
	w.waitLine(t, regexp.MustCompile(`^configmap/first$`))

	// The watch is open: its upstream connection is the agent's, not the gateway's.
	gwConns, agentConns := tcpConns(t, env.Gateway.Process.Pid(), c.IP, c.Port), tcpConns(t, k.Agent.Pid(), c.IP, c.Port)
	t.Logf("TCP connections to %s:%d while the watch is open: gateway %d, agent %d", c.IP, c.Port, gwConns, agentConns)
	if gwConns != 0 {
		t.Errorf("the gateway (pid %d) holds %d TCP connections to %s:%d; want 0: cluster-3 must be reached only through the agent", env.Gateway.Process.Pid(), gwConns, c.IP, c.Port)
	}
	if agentConns < 1 {
		t.Errorf("the agent (pid %d) holds no TCP connection to %s:%d while a watch through the tunnel is open", k.Agent.Pid(), c.IP, c.Port)
	}

	execs := 0
	for _, p := range streamProtocols {
		t.Run("exec/"+p.Name, func(t *testing.T) { checkExec(t, c.ViaHubKubeconfig, p, c.Name) })
		execs += 3 // checkExec runs three; each upgrade is a new connection
	}
	createConfigMap(t, direct, ns, "second")
	w.waitLine(t, regexp.MustCompile(`^configmap/second$`))
	w.stop()

	gw1, server1, agent1 := dials()
	t.Logf("dials during the test: gateway %v, proxy-server %v, agent %v (%d execs)", gw1-gw0, server1-server0, agent1-agent0, execs)
	if agent1-agent0 < float64(execs) {
		t.Errorf("the agent dialed %v times during %d execs; every exec must be a dial through it", agent1-agent0, execs)
	}
	if gw1-gw0 != agent1-agent0 || server1-server0 != agent1-agent0 {
		t.Errorf("dials: gateway %v, proxy-servers %v, agent %v; want all equal (each gateway dial to cluster-3 is one tunnel dial the agent makes)", gw1-gw0, server1-server0, agent1-agent0)
	}
	if f := gatewayMetrics(t)[kDialFailures] - dialFailures0; f != 0 {
		t.Errorf("%v konnectivity dials failed", f)
	}
}

// TestKonnectivityOneConnection sends 1,000 requests while 10 watches and
// 5 attach sessions are open, all to cluster-3: the gateway keeps exactly
// ONE TCP (gRPC) connection to each proxy-server throughout, by its own
// gauges and by the kernel's count of its sockets, and builds no new tunnel. The
// requests and watches share one pooled HTTP/2 connection (one tunnel
// stream); each attach is an upgrade, hence its own tunnel stream, so the
// tunnel carries several streams at once.
func TestKonnectivityOneConnection(t *testing.T) {
	k := requireKonnectivity(t)
	c := k.Cluster
	expectOK(t, c.GatewayName)
	base := gatewayMetrics(t)
	for _, p := range k.Servers {
		if perServer(base, kProxyConns, p) != 1 || perServer(base, kOpenTunnels, p) != 1 {
			t.Fatalf("before the load, %s: %s = %v, %s = %v; want 1 and 1", p.ID, kProxyConns, perServer(base, kProxyConns, p), kOpenTunnels, perServer(base, kOpenTunnels, p))
		}
	}

	direct, ns := konnectivityNamespace(t, k)
	_, via := viaHub(t, c.GatewayName)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var watches []watch.Interface
	for range 10 {
		w, err := via.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("watch through the gateway: %v", err)
		}
		defer w.Stop()
		watches = append(watches, w)
	}

	const attaches = 5
	for range attaches {
		a := startKubectl(t, c.ViaHubKubeconfig, nil, "attach", "demo")
		a.waitLine(t, regexp.MustCompile(`^attached to `+c.Name+`/demo/main$`))
		defer a.stop()
	}
	agentOpen := mustScrape(t, k.AgentMetricsURL).Sum("konnectivity_network_proxy_agent_open_endpoint_connections")

	// The kernel's count per proxy-server, sampled while the load runs.
	stop, sampled := make(chan struct{}), make(chan [2]int)
	go func() {
		lo, hi := 1<<30, 0
		for {
			for _, p := range k.Servers {
				n, err := testproc.TCPConns(env.Gateway.Process.Pid(), "127.0.0.1", p.ServerPort)
				if err != nil {
					n = -1 // shows up in the span
				}
				lo, hi = min(lo, n), max(hi, n)
			}
			select {
			case <-stop:
				sampled <- [2]int{lo, hi}
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	// Stopped on every way out: a sampler left running after a failure
	// would read env.Gateway while a later test restarts it.
	stopSampling := sync.OnceValue(func() [2]int { close(stop); return <-sampled })
	defer stopSampling()
	const workers, each = 10, 100
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for range workers {
		wg.Go(func() {
			for range each {
				// /version: served from memory, so the load is on the tunnel, not on etcd.
				if code, body, err := hubDo(proxyPath(c.GatewayName, "/version")); err != nil || code != http.StatusOK {
					errs <- fmt.Errorf("%d %.200s %v", code, body, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("request to cluster-3 through the gateway: %v", err)
	}
	// Every watch is still live after the load.
	createConfigMap(t, direct, ns, "after-load")
	for i, w := range watches {
		if err := waitAdded(w, "after-load"); err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
	}
	span := stopSampling()

	m := gatewayMetrics(t)
	if span != [2]int{1, 1} {
		t.Errorf("the kernel saw between %d and %d TCP connections from the gateway to a proxy-server during the load; want exactly 1 to each", span[0], span[1])
	}
	for _, p := range k.Servers {
		if perServer(m, kProxyConns, p) != 1 || perServer(m, kOpenTunnels, p) != 1 {
			t.Errorf("after the load, %s: %s = %v, %s = %v; want 1 and 1", p.ID, kProxyConns, perServer(m, kProxyConns, p), kOpenTunnels, perServer(m, kOpenTunnels, p))
		}
	}
	if d := m.Sum(kBuilds) - base.Sum(kBuilds); d != 0 {
		t.Errorf("%s grew by %v during the load; want 0 (one tunnel for everything)", kBuilds, d)
	}
	if d := m[kDialFailures] - base[kDialFailures]; d != 0 {
		t.Errorf("%v konnectivity dials failed during the load", d)
	}
	if d := m[kDials] - base[kDials]; d < attaches || agentOpen < attaches+1 {
		t.Errorf("%d attach sessions: %v dials through the tunnels, the agent had %v connections open; want at least %d and %d",
			attaches, d, agentOpen, attaches, attaches+1)
	}
	t.Logf("1,000 requests, 10 watches, %d attaches: %v dials through the tunnels, %v open at the agent during the load", attaches, m[kDials]-base[kDials], agentOpen)
}
