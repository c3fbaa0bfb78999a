package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// reachable returns a gateway's Reachable condition as the hub serves it.
func reachable(t *testing.T, name string) *metav1.Condition {
	t.Helper()
	gw, err := gatewayClient(t, env.Hub.Kubeconfig).GatewayV1alpha1().ClusterGateways().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get %s: %v", name, err)
	}
	return meta.FindStatusCondition(gw.Status.Conditions, gatewayv1alpha1.ConditionReachable)
}

func waitReachable(t *testing.T, name string, status metav1.ConditionStatus, reason string) *metav1.Condition {
	t.Helper()
	var c *metav1.Condition
	eventually(t, fmt.Sprintf("%s Reachable=%s (%s)", name, status, reason), func() error {
		c = reachable(t, name)
		if c == nil || c.Status != status || (reason != "" && c.Reason != reason) {
			return fmt.Errorf("Reachable = %+v", c)
		}
		return nil
	})
	return c
}

// hangingCluster is a TLS "cluster" that answers /readyz and /version but
// never answers anything else: reachable, yet silent for real requests.
func hangingCluster(t *testing.T) (url string, caPEM []byte) {
	t.Helper()
	ca := testpki.MustCA(t, "hanging-ca-"+t.Name())
	serving := ca.MustIssue(t, testpki.Spec{CommonName: "hanging", IPs: []string{testIP}, Server: true})
	l, err := net.Listen("tcp", testIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/readyz":
				_, _ = w.Write([]byte("ok"))
			case "/version":
				_, _ = w.Write([]byte(`{"gitVersion":"v0.0.0-hanging"}`))
			default:
				select {
				case <-release:
				case <-r.Context().Done():
				}
			}
		}),
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{serving.TLS()}},
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = srv.ServeTLS(l, "", "") }()
	t.Cleanup(func() { close(release); _ = srv.Close() })
	return "https://" + l.Addr().String(), ca.CertPEM
}

// TestReachability: every cluster is probed through the gateway and shows
// Reachable with its reason, version and latency; a cluster that cannot be
// reached is Reachable=False and its requests fail at once with 503 and
// Retry-After; one that never answers a request gets 504 within the
// response-header timeout even for a watch.
func TestReachability(t *testing.T) {
	requireGateway(t)
	t.Parallel()
	for _, m := range env.Managed {
		c := waitReachable(t, m.GatewayName, metav1.ConditionTrue, gatewayv1alpha1.ReasonReachable)
		gw, err := gatewayClient(t, env.Hub.Kubeconfig).GatewayV1alpha1().ClusterGateways().Get(context.Background(), m.GatewayName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r := gw.Status.Reachability; r == nil || r.ServerVersion != "v1.37.2" || r.Latency == nil || r.LastProbeTime == nil {
			t.Errorf("%s: status.reachability %+v, want the cluster's version, a latency and the probe time (condition %+v)", m.GatewayName, r, c)
		}
	}
	out := mustKubectl(t, env.Hub.Kubeconfig, "get", "clustergateways", env.Managed[0].GatewayName, "-o", "wide")
	header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
	for _, col := range []string{"REACHABLE", "REASON", "VERSION", "LATENCY", "PROXY", "EXPIRY"} {
		if !strings.Contains(strings.Join(header, " "), col) {
			t.Errorf("-o wide has no %s column:\n%s", col, out)
		}
	}
	if row := tableRow(out, env.Managed[0].GatewayName); len(row) < 7 || row[5] != "True" || !strings.Contains(strings.Join(row, " "), "v1.37.2") {
		t.Errorf("-o wide row %v, want REACHABLE True and the version\n%s", row, out)
	}

	// Nothing listens: DialFailed, and requests fail at once.
	l, err := net.Listen("tcp", testIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "https://" + l.Addr().String()
	l.Close()
	dead := uniqueName(t, "health-dead")
	createGateway(t, tokenGateway(dead, closed, randomToken(t)))
	waitReachable(t, dead, metav1.ConditionFalse, gatewayv1alpha1.ReasonDialFailed)
	code, body := hubGet(t, proxyPath(dead, "/api"))
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "Reachable=False") || !strings.Contains(body, "DialFailed") {
		t.Fatalf("a request to a cluster known to be down: %d %s; want 503 naming the probe's reason", code, body)
	}
	r := rawRequest(t, hostOf(env.Gateway.URL), env.Gateway.CA.CertPEM, adminCert(t),
		fmt.Sprintf("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", proxyPath(dead, "/api")))
	if r.Code != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
		t.Fatalf("straight to the gateway: %d, Retry-After %q", r.Code, r.Header.Get("Retry-After"))
	}

	// Reachable (its /readyz answers) but silent for requests: a watch is
	// not held forever.
	url, ca := hangingCluster(t)
	hanging := uniqueName(t, "health-hanging")
	gw := tokenGateway(hanging, url, randomToken(t))
	gw.Spec.Endpoint.InsecureSkipTLSVerify, gw.Spec.Endpoint.CABundle = false, ca
	createGateway(t, gw)
	waitReachable(t, hanging, metav1.ConditionTrue, gatewayv1alpha1.ReasonReachable)
	start := time.Now()
	code, body = hubGet(t, proxyPath(hanging, "/api/v1/namespaces/default/configmaps?watch=true"))
	if code != http.StatusGatewayTimeout || !strings.Contains(body, "--upstream-response-header-timeout") || time.Since(start) < upstreamHeaderTimeout {
		t.Fatalf("a watch of a cluster that never answers: %d after %s: %s; want 504 naming the response-header timeout, not before it passed (%s)",
			code, time.Since(start).Round(time.Millisecond), body, upstreamHeaderTimeout)
	}
}

// adminCert is the hub admin's client certificate, which the gateway trusts
// directly (the hub's client CA).
func adminCert(t *testing.T) *tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(env.Hub.Admin.CertPEM, env.Hub.Admin.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

// TestManagedClusterKilled: a managed kube-apiserver killed mid-watch. The
// watch through the gateway ends cleanly, the gateway turns Reachable=False
// (a watch of ClusterGateways hears of it), requests fail at once; after a
// restart it turns True again and a new watch works. It stops a cluster, so
// it does not run in parallel.
func TestManagedClusterKilled(t *testing.T) {
	requireGateway(t)
	m := env.Managed[1]
	waitReachable(t, m.GatewayName, metav1.ConditionTrue, "")
	gc := gatewayClient(t, env.Hub.Kubeconfig).GatewayV1alpha1().ClusterGateways()
	cur, err := gc.Get(context.Background(), m.GatewayName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gwWatch, err := gc.Watch(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", m.GatewayName).String(), ResourceVersion: cur.ResourceVersion,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer gwWatch.Stop()

	_, cs := viaHub(t, m.GatewayName)
	w, err := cs.CoreV1().ConfigMaps("default").Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			if err := env.StartCluster(context.Background(), m); err != nil {
				t.Errorf("restart %s: %v", m.Name, err)
			}
		}
	})
	if err := env.KillCluster(m); err != nil {
		t.Fatal(err)
	}
	if err := watchEnds(w, kubectlTimeout); err != nil {
		t.Fatalf("the watch through the gateway after its cluster was killed: %v", err)
	}
	reachableEvent(t, gwWatch, metav1.ConditionFalse)
	code, body := hubGet(t, proxyPath(m.GatewayName, "/api"))
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "Reachable=False") {
		t.Fatalf("a request to the killed cluster: %d %s; want the prober's fast 503", code, body)
	}

	if err := env.StartCluster(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	restarted = true
	reachableEvent(t, gwWatch, metav1.ConditionTrue)
	w2, err := cs.CoreV1().ConfigMaps("default").Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("a new watch after the restart: %v", err)
	}
	defer w2.Stop()
	expectAdded(t, w2, managedClient(t, 1), "default", uniqueName(t, "after-restart"))
}

// reachableEvent waits on a watch of one ClusterGateway for a MODIFIED event
// whose Reachable condition has status.
func reachableEvent(t *testing.T, w watch.Interface, status metav1.ConditionStatus) {
	t.Helper()
	timeout := time.After(kubectlTimeout)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch of the ClusterGateway ended before Reachable=%s", status)
			}
			gw, isGW := ev.Object.(*gatewayv1alpha1.ClusterGateway)
			if !isGW || ev.Type != watch.Modified {
				continue
			}
			if c := meta.FindStatusCondition(gw.Status.Conditions, gatewayv1alpha1.ConditionReachable); c != nil && c.Status == status {
				return
			}
		case <-timeout:
			t.Fatalf("no watch event with Reachable=%s within %s", status, kubectlTimeout)
		}
	}
}
