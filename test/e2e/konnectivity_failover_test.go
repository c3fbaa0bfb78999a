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
//   - a new client cert+key: new requests use a new tunnel (rotations_total
//     +1, two connections to the proxy-server), an open watch on the old one
//     keeps streaming until the grace period, then ends, and a re-watch works;
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
	metric := func(n string) float64 { return gatewayMetrics(t)[n] }

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
	waitMetric(t, kRotations, rot0+1)
	retiredBy := time.Now() // rotated: the old tunnel is retiring
	t.Logf("rotation seen %s after the files changed (reload interval 1s)", retiredBy.Sub(rotateAt).Round(100*time.Millisecond))
	// The watch on the retiring tunnel still delivers half way through the
	// grace period; at its end the retired tunnel is closed and the watch
	// ends cleanly (no error event, as when a cluster ends a watch at its
	// timeout). Followed from now, while the checks below run.
	retired := startGraceCheck(t, w, direct, ns, "after-rotation", rotateAt, retiredBy, konnectivityGrace)
	expectOK(t, name)
	if m := gatewayMetrics(t); m[kProxyConns] != 2 || m[kOpenTunnels] != 2 || m[kBuilds]-builds0 != 1 {
		t.Errorf("after the rotation, while the old tunnel serves the watch: %s %v, %s %v, builds +%v; want 2, 2, +1",
			kProxyConns, m[kProxyConns], kOpenTunnels, m[kOpenTunnels], m[kBuilds]-builds0)
	}
	if n := proxyServerConns(t, k); n != 2 {
		t.Errorf("the kernel sees %d connections from the gateway to the proxy-server during the grace period; want 2", n)
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
	waitMetric(t, kProxyConns, 1)

	// 2. The CA file becomes a bundle: the proxy-server's CA and another one.
	extra := newTestCreds(t, "unrelated-ca")
	replace(t, k.CAFile, append(append([]byte{}, k.ServerCA.CertPEM...), extra.CAPEM...))
	waitMetric(t, kRotations, rot0+2)
	expectOK(t, name)
	waitMetric(t, kProxyConns, 1) // the old tunnel had no live streams left

	// 3. Unusable content is rejected and changes nothing.
	m0 := gatewayMetrics(t)
	replace(t, k.CertFile, []byte("this is not a certificate\n"))
	waitMetric(t, kRejected, m0[kRejected]+1)
	expectOK(t, name)
	replace(t, k.CertFile, kp.CertPEM) // back to the material in use: no rotation
	replace(t, k.CAFile, nil)
	waitMetric(t, kRejected, m0[kRejected]+2)
	expectOK(t, name)
	if m := gatewayMetrics(t); m[kRotations] != m0[kRotations] || m[kBuilds] != m0[kBuilds] || m[kProxyConns] != 1 {
		t.Errorf("garbage files: rotations %v→%v, builds %v→%v, %s %v; want unchanged and 1",
			m0[kRotations], m[kRotations], m0[kBuilds], m[kBuilds], kProxyConns, m[kProxyConns])
	}
}

// TestKonnectivityProxyServerRestart SIGKILLs the proxy-server: requests to
// cluster-3 then fail at once with 503 and a message naming the
// proxy-server, other clusters keep working, and once it is back on the
// same ports cluster-3 works again; goroutines and fds return near their
// baseline. It kills a shared process, so it is not parallel.
func TestKonnectivityProxyServerRestart(t *testing.T) {
	k := requireKonnectivity(t)
	name, other := k.Cluster.GatewayName, env.Managed[0].GatewayName
	expectOK(t, name)
	expectOK(t, other)
	base := gatewayMetrics(t)

	pid := k.Server.Pid()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the proxy-server (pid %d): %v", pid, err)
	}
	<-k.Server.Done()
	t.Cleanup(func() { // whatever happens below, later tests get it back
		if k.Server.Exited() {
			if err := env.StartKonnectivityServer(context.Background()); err != nil {
				t.Errorf("restart the proxy-server: %v", err)
			}
		}
	})

	// The first request may still find the tunnel up, for an instant.
	var code int
	var body string
	eventually(t, "requests to cluster-3 fail with 503 once the proxy-server is gone", func() error {
		code, body = timedGet(t, proxyPath(name, "/api/v1/namespaces/default"))
		if code != http.StatusServiceUnavailable {
			return fmt.Errorf("%d %.300s", code, body)
		}
		return nil
	})
	for range 3 {
		code, body = timedGet(t, proxyPath(name, "/api/v1/namespaces/default"))
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "konnectivity") || !strings.Contains(body, k.ServerAddress()) {
			t.Fatalf("with the proxy-server down: %d %s; want 503 naming konnectivity and the proxy-server %s", code, body, k.ServerAddress())
		}
	}
	t.Logf("with the proxy-server down: %d %s", code, body)
	expectOK(t, other)
	if m := gatewayMetrics(t); m[kProxyConns] != 0 {
		t.Errorf("with the proxy-server down: %s = %v, want 0", kProxyConns, m[kProxyConns])
	}

	downAt := time.Now()
	if err := env.StartKonnectivityServer(context.Background()); err != nil {
		t.Fatalf("restart the proxy-server on the same ports: %v", err)
	}
	eventually(t, "cluster-3 works again after the proxy-server restart", func() error {
		if code, body := timedGet(t, proxyPath(name, "/api/v1/namespaces/default")); code != http.StatusOK {
			return fmt.Errorf("%d %.300s", code, body)
		}
		return nil
	})
	t.Logf("cluster-3 answered again %s after the restart began", time.Since(downAt).Round(100*time.Millisecond))
	m := gatewayMetrics(t)
	if m[kBuildFailures] <= base[kBuildFailures] {
		t.Errorf("%s did not grow while the proxy-server was down: no rebuild attempts?", kBuildFailures)
	}
	if m[kProxyConns] != 1 || proxyServerConns(t, k) != 1 {
		t.Errorf("after recovery: %s = %v, the kernel sees %d; want 1 and 1", kProxyConns, m[kProxyConns], proxyServerConns(t, k))
	}
	awaitGatewayBaseline(t, base)
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

// waitMetric polls the gateway's metric name until it equals want.
func waitMetric(t *testing.T, name string, want float64) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s = %v", name, want), func() error {
		if got := gatewayMetrics(t)[name]; got != want {
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
