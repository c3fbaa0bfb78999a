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

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// The suite gateway's prober flags (gatewayArgs) and its --dial-timeout.
const (
	suiteProbeInterval    = time.Second
	suiteProbeTimeout     = 2 * time.Second
	suiteFailureThreshold = 2
	suiteDialTimeout      = 3 * time.Second
)

// detectionBound is docs/api.md's bound on noticing a cluster that stopped
// answering: --probe-failure-threshold × (--probe-interval + 10% jitter +
// --probe-timeout).
var detectionBound = time.Duration(suiteFailureThreshold) * (suiteProbeInterval*11/10 + suiteProbeTimeout)

// TestKonnectivityProxyServerStopped stops every konnectivity proxy-server
// with SIGSTOP: they keep their sockets open and answer nothing, so the
// gateway's tunnels see no error (only the gateway's health check notices;
// TestKonnectivityProxyServerFailover stops one of them). The prober
// probes the cluster behind them through the tunnels, so it turns
// Reachable=False (DialFailed or NoAnswer) within the documented bound
// (asserted at twice the bound, for a loaded machine), and requests then
// fail at once with the fast 503 (the message of a cluster known to be
// unreachable, before any dial timeout), while direct clusters keep
// working. After SIGCONT it turns True again, requests through the tunnels
// work, and the gateway's goroutines and fds return near their baseline.
// It stops shared processes, so it is not parallel.
func TestKonnectivityProxyServerStopped(t *testing.T) {
	k := requireKonnectivity(t)
	name := k.Cluster.GatewayName
	waitReachable(t, name, metav1.ConditionTrue, gatewayv1alpha1.ReasonReachable)
	expectOK(t, name)

	base := gatewayMetrics(t)
	var pids []int
	for _, p := range k.Servers {
		pids = append(pids, p.Process.Pid())
	}
	stopped := false
	t.Cleanup(func() {
		if stopped {
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGCONT)
			}
		}
	})
	stopped = true
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP a proxy-server (pid %d): %v", pid, err)
		}
	}
	stoppedAt := time.Now()

	var c *metav1.Condition
	for {
		c = reachable(t, name)
		if c != nil && c.Status == metav1.ConditionFalse {
			break
		}
		if time.Since(stoppedAt) > 2*detectionBound+pollTimeout {
			t.Fatalf("%s still Reachable=%+v %s after the proxy-server was stopped", name, c, time.Since(stoppedAt))
		}
		time.Sleep(100 * time.Millisecond)
	}
	detected := time.Since(stoppedAt)
	t.Logf("Reachable=False (%s: %s) %s after SIGSTOP (documented bound %s)", c.Reason, c.Message, detected.Round(100*time.Millisecond), detectionBound)
	if c.Reason != gatewayv1alpha1.ReasonDialFailed && c.Reason != gatewayv1alpha1.ReasonNoAnswer {
		t.Errorf("Reachable=False with reason %s; want DialFailed or NoAnswer", c.Reason)
	}
	if detected > 2*detectionBound {
		t.Errorf("detected after %s; the documented bound is %s (asserted at twice that)", detected, detectionBound)
	}

	for range 3 {
		start := time.Now()
		code, body := hubGet(t, proxyPath(name, "/api/v1/namespaces/default"))
		took := time.Since(start)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "Reachable=False") {
			t.Fatalf("a request while the proxy-server is stopped: %d %s; want the fast 503 of a cluster known to be unreachable", code, body)
		}
		if took >= suiteDialTimeout {
			t.Errorf("the 503 took %s, as long as the dial timeout %s: not the fail-fast path", took, suiteDialTimeout)
		}
		t.Logf("while stopped: %d in %s", code, took.Round(time.Millisecond))
	}
	expectOK(t, env.Managed[0].GatewayName)

	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatalf("SIGCONT a proxy-server: %v", err)
		}
	}
	stopped = false
	contAt := time.Now()
	waitReachable(t, name, metav1.ConditionTrue, gatewayv1alpha1.ReasonReachable)
	t.Logf("Reachable=True %s after SIGCONT", time.Since(contAt).Round(100*time.Millisecond))
	eventually(t, "requests through the tunnel work again", func() error {
		if code, body := hubGet(t, proxyPath(name, "/api/v1/namespaces/default")); code != http.StatusOK {
			return fmt.Errorf("%d %.300s", code, body)
		}
		return nil
	})
	_, via := viaHub(t, name)
	if _, err := via.CoreV1().ConfigMaps("default").List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatalf("a list through the tunnel after SIGCONT: %v", err)
	}
	t.Logf("requests through the tunnel work %s after SIGCONT", time.Since(contAt).Round(100*time.Millisecond))
	// The dials and probes that hung on the stopped proxy-server left nothing behind.
	eventually(t, "gateway goroutines and fds return near their baseline", func() error {
		m := gatewayMetrics(t)
		if g, f := m["go_goroutines"], m["process_open_fds"]; g > base["go_goroutines"]+15 || f > base["process_open_fds"]+5 {
			return fmt.Errorf("goroutines %v (baseline %v), open fds %v (baseline %v)", g, base["go_goroutines"], f, base["process_open_fds"])
		}
		return nil
	})
}
