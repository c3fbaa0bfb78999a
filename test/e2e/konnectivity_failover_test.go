package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
)

// konnectivityGrace is long next to how long a ConfigMap's event takes to
// reach a watch through the tunnel and the gateway, even on a loaded
// machine: the watch on a retired tunnel must deliver one created half way
// through it.
const konnectivityGrace = 8 * time.Second

// TestKonnectivityRotation rotates the gateway's konnectivity material on
// disk while the gateway runs (it re-reads it every second):
//   - a new client cert+key: new requests use new tunnels (rotations_total
//     +1 for each proxy-server, two connections to each), an open watch on an
//     old one keeps streaming until the grace period, then ends, and a
//     re-watch works;
//   - a CA bundle with one more CA: another rotation, requests keep working;
//   - garbage cert, then an empty CA file: rejected_reloads_total grows, no
//     rotation, no rebuild, requests keep working.
//
// It restarts the gateway with a short grace period, so it is not parallel.
func TestKonnectivityRotation(t *testing.T) {
	k := requireKonnectivity(t)
	name := k.Cluster.GatewayName
	restartGateway(t, append(append([]string{}, env.GatewayArgs...), "--retire-grace-period="+konnectivityGrace.String()))
	t.Cleanup(func() { restartGateway(t, nil) })
	t.Cleanup(func() { restoreKonnectivityFiles(t, k) }) // runs first: the gateway refuses to start on bad files
	expectOK(t, name)
	metric := func(n string) float64 { return gatewayMetrics(t).Sum(n) }
	servers := float64(len(k.Servers)) // each rotates its own tunnel

	direct, ns := konnectivityNamespace(t, k)
	_, via := viaHub(t, name)
	w, err := via.CoreV1().ConfigMaps(ns).Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watch through the gateway: %v", err)
	}
	defer w.Stop()
	createConfigMap(t, direct, ns, "before-rotation")
	if err := waitAdded(w, "before-rotation"); err != nil {
		t.Fatal(err)
	}

	// 1. A new client certificate from the same CA.
	rot0, builds0 := metric(kRotations), metric(kBuilds)
	kp, err := k.IssueClientCert("gateway-client-rotated")
	if err != nil {
		t.Fatal(err)
	}
	rotateAt := time.Now() // the old tunnel cannot be retired before this
	replace(t, k.KeyFile, kp.KeyPEM)
	replace(t, k.CertFile, kp.CertPEM)
	waitMetric(t, kRotations, rot0+servers)
	retiredBy := time.Now() // rotated: the old tunnel is retiring
	t.Logf("rotation seen %s after the files changed (reload interval 1s)", retiredBy.Sub(rotateAt).Round(100*time.Millisecond))
	// The watch on the retiring tunnel still delivers half way through the
	// grace period; at its end the retired tunnel is closed and the watch
	// ends cleanly (no error event, as when a cluster ends a watch at its
	// timeout). Followed from now, while the checks below run.
	retired := startGraceCheck(t, w, direct, ns, "after-rotation", rotateAt, retiredBy, konnectivityGrace)
	expectOK(t, name)
	// The watch holds one old tunnel; the others had no live conns and closed.
	if m := gatewayMetrics(t); m.Sum(kProxyConns) != servers+1 || m.Sum(kOpenTunnels) != servers+1 || m.Sum(kBuilds)-builds0 != servers {
		t.Errorf("after the rotation, while the old tunnel serves the watch: %s %v, %s %v, builds +%v; want %v, %v, +%v",
			kProxyConns, m.Sum(kProxyConns), kOpenTunnels, m.Sum(kOpenTunnels), m.Sum(kBuilds)-builds0, servers+1, servers+1, servers)
	}
	if n := proxyServerConns(t, k); n != len(k.Servers)+1 {
		t.Errorf("the kernel sees %d connections from the gateway to the proxy-servers during the grace period; want %d", n, len(k.Servers)+1)
	}
	retired.wait(t)
	w2, err := via.CoreV1().ConfigMaps(ns).Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("re-watch after the grace period: %v", err)
	}
	defer w2.Stop()
	createConfigMap(t, direct, ns, "re-watch")
	if err := waitAdded(w2, "re-watch"); err != nil {
		t.Fatal(err)
	}
	w2.Stop()
	waitMetric(t, kProxyConns, servers)

	// 2. The CA file becomes a bundle: the proxy-servers' CA and another one.
	extra := newTestCreds(t, "unrelated-ca")
	replace(t, k.CAFile, append(append([]byte{}, k.ServerCA.CertPEM...), extra.CAPEM...))
	waitMetric(t, kRotations, rot0+2*servers)
	expectOK(t, name)
	waitMetric(t, kProxyConns, servers) // the old tunnels had no live streams left

	// 3. Unusable content is rejected and changes nothing.
	m0 := gatewayMetrics(t)
	replace(t, k.CertFile, []byte("this is not a certificate\n"))
	waitMetric(t, kRejected, m0[kRejected]+1)
	expectOK(t, name)
	replace(t, k.CertFile, kp.CertPEM) // back to the material in use: no rotation
	replace(t, k.CAFile, nil)
	waitMetric(t, kRejected, m0[kRejected]+2)
	expectOK(t, name)
	if m := gatewayMetrics(t); m.Sum(kRotations) != m0.Sum(kRotations) || m.Sum(kBuilds) != m0.Sum(kBuilds) || m.Sum(kProxyConns) != servers {
		t.Errorf("garbage files: rotations %v→%v, builds %v→%v, %s %v; want unchanged and %v",
			m0.Sum(kRotations), m.Sum(kRotations), m0.Sum(kBuilds), m.Sum(kBuilds), kProxyConns, m.Sum(kProxyConns), servers)
	}
}

// TestKonnectivityProxyServerRestart SIGKILLs every proxy-server: requests
// to cluster-3 then fail at once with 503 and a message naming konnectivity
// and each proxy-server, other clusters keep working, and once they are back
// on the same ports cluster-3 works again; goroutines and fds return near
// their baseline. (TestKonnectivityProxyServerFailover kills one of them.)
// It kills shared processes, so it is not parallel.
func TestKonnectivityProxyServerRestart(t *testing.T) {
	k := requireKonnectivity(t)
	name, other := k.Cluster.GatewayName, env.Managed[0].GatewayName
	expectOK(t, name)
	expectOK(t, other)
	base := gatewayMetrics(t)

	for i := range k.Servers {
		killProxyServer(t, k, i)
	}

	// The first request may still find a tunnel up, for an instant.
	var code int
	var body string
	eventually(t, "requests to cluster-3 fail with 503 once the proxy-servers are gone", func() error {
		code, body = timedGet(t, proxyPath(name, "/api/v1/namespaces/default"))
		if code != http.StatusServiceUnavailable {
			return fmt.Errorf("%d %.300s", code, body)
		}
		return nil
	})
	for range 3 {
		code, body = timedGet(t, proxyPath(name, "/api/v1/namespaces/default"))
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "konnectivity") {
			t.Fatalf("with the proxy-servers down: %d %s; want 503 naming konnectivity", code, body)
		}
		for _, p := range k.Servers {
			if !strings.Contains(body, p.Address()) {
				t.Fatalf("with the proxy-servers down: %d %s; want it to name proxy-server %s", code, body, p.Address())
			}
		}
	}
	t.Logf("with the proxy-servers down: %d %s", code, body)
	expectOK(t, other)
	if m := gatewayMetrics(t); m.Sum(kProxyConns) != 0 {
		t.Errorf("with the proxy-servers down: %s = %v, want 0", kProxyConns, m.Sum(kProxyConns))
	}

	downAt := time.Now()
	for i := range k.Servers {
		if err := env.StartKonnectivityServer(context.Background(), i); err != nil {
			t.Fatalf("restart %s on the same ports: %v", k.Servers[i].ID, err)
		}
	}
	eventually(t, "cluster-3 works again after the proxy-servers restart", func() error {
		if code, body := timedGet(t, proxyPath(name, "/api/v1/namespaces/default")); code != http.StatusOK {
			return fmt.Errorf("%d %.300s", code, body)
		}
		return nil
	})
	t.Logf("cluster-3 answered again %s after the restart began", time.Since(downAt).Round(100*time.Millisecond))
	for _, p := range k.Servers {
		waitTunnelUp(t, p, 1)
	}
	m := gatewayMetrics(t)
	for _, p := range k.Servers {
		if perServer(m, kBuildFailures, p) <= perServer(base, kBuildFailures, p) {
			t.Errorf("%s for %s did not grow while it was down: no rebuild attempts?", kBuildFailures, p.ID)
		}
		if perServer(m, kProxyConns, p) != 1 || proxyServerConnsTo(t, p) != 1 {
			t.Errorf("after recovery: %s{%s} = %v, the kernel sees %d; want 1 and 1", kProxyConns, p.ID, perServer(m, kProxyConns, p), proxyServerConnsTo(t, p))
		}
	}
	awaitGatewayBaseline(t, base)
}

// killProxyServer SIGKILLs proxy-server i by pid; whatever the test does
// next, it is started again on the same ports when the test ends.
func killProxyServer(t *testing.T, k *localenv.Konnectivity, i int) {
	t.Helper()
	p := k.Servers[i]
	if err := syscall.Kill(p.Process.Pid(), syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s (pid %d): %v", p.ID, p.Process.Pid(), err)
	}
	<-p.Process.Done()
	t.Cleanup(func() {
		if p.Process.Exited() {
			if err := env.StartKonnectivityServer(context.Background(), i); err != nil {
				t.Errorf("restart %s: %v", p.ID, err)
			}
		}
	})
}

// waitTunnelUp polls the gateway's tunnel_up for proxy-server p.
func waitTunnelUp(t *testing.T, p *localenv.ProxyServer, want float64) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s{%s} = %v", kTunnelUp, p.ID, want), func() error {
		if got := perServer(gatewayMetrics(t), kTunnelUp, p); got != want {
			return fmt.Errorf("%v", got)
		}
		return nil
	})
}

// timedGet is hubGet that fails if the answer takes longer than the hub's
// request timeout: a hang there would be a 504, not an answer.
func timedGet(t *testing.T, path string) (int, string) {
	t.Helper()
	start := time.Now()
	code, body := hubGet(t, path)
	if d := time.Since(start); d > hubRequestTimeout {
		t.Fatalf("GET %s took %s, more than the request timeout %s: the gateway hung", path, d, hubRequestTimeout)
	}
	return code, body
}

// waitMetric polls the gateway's metric name (summed over its labels)
// until it equals want.
func waitMetric(t *testing.T, name string, want float64) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s = %v", name, want), func() error {
		if got := gatewayMetrics(t).Sum(name); got != want {
			return fmt.Errorf("%s = %v", name, got)
		}
		return nil
	})
}

func replace(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := localenv.ReplaceFile(path, data); err != nil {
		t.Fatal(err)
	}
}

// restoreKonnectivityFiles puts back the material the environment started with.
func restoreKonnectivityFiles(t *testing.T, k *localenv.Konnectivity) {
	t.Helper()
	for path, data := range map[string][]byte{k.CAFile: k.ServerCA.CertPEM, k.KeyFile: k.Client.KeyPEM, k.CertFile: k.Client.CertPEM} {
		if err := localenv.ReplaceFile(path, data); err != nil {
			t.Errorf("restore %s: %v", path, err)
		}
	}
}
