package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestIsolation saturates one cluster's ordinary slots and queue with slow
// requests through the real hub, and shows as real clients see it: another
// cluster still answers, the saturated one answers 429 with Retry-After (raw
// HTTP, client-go and kubectl), a watch on it still gets a stream slot, and
// once the slow requests end the limiter holds nothing and the cluster
// answers again. It restarts the gateway with small limits, so it does not
// run in parallel with other tests.
func TestIsolation(t *testing.T) {
	requireGateway(t)
	const (
		slots  = 2
		queued = 2
	)
	args := append(append([]string{}, env.GatewayArgs...),
		fmt.Sprintf("--max-requests-per-cluster=%d", slots), fmt.Sprintf("--max-queued-per-cluster=%d", queued),
		// Long enough that nothing but the test ends the slow requests.
		"--queue-wait-timeout=5m", "--request-timeout=5m", "--upstream-response-header-timeout=5m")
	restartGateway(t, args)
	t.Cleanup(func() { restartGateway(t, nil) })

	saturated, other := env.Managed[1], env.Managed[0]
	pod := ensureSlowPod(t, 1)
	base := gatewayMetrics(t)
	const (
		inFlight  = `cluster_gateway_fairness_inflight_requests{kind="request"}`
		inQueue   = `cluster_gateway_fairness_queued_requests{kind="request"}`
		full      = `cluster_gateway_fairness_saturated_clusters{kind="request"}`
		tracked   = `cluster_gateway_fairness_tracked_clusters`
		queueFull = `cluster_gateway_fairness_rejected_requests_total{kind="request",reason="queue_full"}`
		got429    = `cluster_gateway_proxy_requests_total{code="429",kind="request"}`
	)

	// slots+queued requests whose answer never comes (the fake kubelet holds
	// non-follow logs of container "slow"), as the hub admin through the hub.
	hub, err := rest.HTTPClientFor(env.Hub.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer hub.CloseIdleConnections()
	proxy := func(c string) string {
		return env.Hub.URL + "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/" + c + "/proxy"
	}
	slowCtx, stopSlow := context.WithCancel(context.Background())
	var slow sync.WaitGroup
	stop := func() { stopSlow(); slow.Wait() }
	defer stop()
	for range slots + queued {
		slow.Add(1)
		go func() {
			defer slow.Done()
			req, _ := http.NewRequestWithContext(slowCtx, http.MethodGet, proxy(saturated.GatewayName)+"/api/v1/namespaces/default/pods/"+pod+"/log?container=slow", nil)
			if resp, err := hub.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	eventually(t, fmt.Sprintf("%s saturated: %d slow requests in flight and %d queued", saturated.GatewayName, slots, queued), func() error {
		m := gatewayMetrics(t)
		if m[inFlight] != slots || m[inQueue] != queued || m[full] != 1 {
			return fmt.Errorf("in flight %v, queued %v, saturated clusters %v", m[inFlight], m[inQueue], m[full])
		}
		return nil
	})

	// Another cluster answers, through client-go and kubectl.
	_, viaOther := viaHub(t, other.GatewayName)
	if _, err := viaOther.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("%s while %s is saturated: %v", other.GatewayName, saturated.GatewayName, err)
	}
	mustKubectl(t, other.ViaHubKubeconfig, "get", "namespace", "default")

	// The saturated cluster answers 429 with Retry-After and a Status naming it.
	req, _ := http.NewRequest(http.MethodGet, proxy(saturated.GatewayName)+"/api/v1/namespaces/default", nil)
	req.Header.Set("Accept", "application/json")
	resp, err := hub.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("%s saturated: %d, Retry-After %q: %s; want 429 with Retry-After 1 (no slot given back yet)", saturated.GatewayName, resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	var st metav1.Status
	if err := json.Unmarshal(body, &st); err != nil || st.Reason != metav1.StatusReasonTooManyRequests || st.Details == nil || st.Details.Name != saturated.GatewayName {
		t.Fatalf("429 body %s (%v): want a TooManyRequests Status naming %s", body, err, saturated.GatewayName)
	}
	wantSays := []string{fmt.Sprintf("cluster %q", saturated.GatewayName), "--max-requests-per-cluster", "--max-queued-per-cluster"}
	for _, s := range wantSays {
		if !strings.Contains(st.Message, s) {
			t.Errorf("429 message %q does not say %q", st.Message, s)
		}
	}

	// client-go sees a TooManyRequests error that suggests the delay.
	cfg, viaSaturated := viaHub(t, saturated.GatewayName)
	err = viaSaturated.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces/default").MaxRetries(0).Do(context.Background()).Error()
	if d, ok := apierrors.SuggestsClientDelay(err); !apierrors.IsTooManyRequests(err) || !ok || d != 1 {
		t.Fatalf("client-go through %s: %v (suggested delay %d, %v), want TooManyRequests suggesting 1s", cfg.Host, err, d, ok)
	}
	// kubectl retries on Retry-After, then reports the gateway's words.
	r := kubectl(t, saturated.ViaHubKubeconfig, nil, "", "get", "--raw", "/api/v1/namespaces/default")
	if r.Err == nil {
		t.Fatalf("kubectl through saturated %s succeeded: %s", saturated.GatewayName, r.Stdout)
	}
	t.Logf("kubectl through saturated %s: %s", saturated.GatewayName, strings.TrimSpace(r.Stderr))
	for _, s := range wantSays {
		if !strings.Contains(r.Stderr, s) {
			t.Errorf("kubectl's error %q does not say %q", r.Stderr, s)
		}
	}

	// Long-running requests have slots of their own: a watch on the
	// saturated cluster starts and delivers.
	direct := managedClient(t, 1)
	ns := uniqueName(t, "isolation")
	if _, err := direct.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = direct.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	w, err := viaSaturated.CoreV1().ConfigMaps(ns).Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("a watch on %s while its ordinary slots are full: %v", saturated.GatewayName, err)
	}
	expectAdded(t, w, direct, ns, "while-saturated")
	w.Stop()

	m := gatewayMetrics(t)
	if d := m[queueFull] - base[queueFull]; d < 3 {
		t.Errorf("rejected_requests_total{reason=queue_full} grew by %v, want at least 3 (raw, client-go, kubectl)", d)
	}
	if d := m[got429] - base[got429]; d < 3 {
		t.Errorf("proxy_requests_total{code=429} grew by %v, want at least 3", d)
	}

	// The slow requests end: nothing is left in the limiter, and the
	// cluster answers again.
	stop()
	eventually(t, "the limiter to hold nothing", func() error {
		m := gatewayMetrics(t)
		if m[inFlight] != 0 || m[inQueue] != 0 || m[full] != 0 || m[tracked] != 0 {
			return fmt.Errorf("in flight %v, queued %v, saturated %v, tracked clusters %v", m[inFlight], m[inQueue], m[full], m[tracked])
		}
		return nil
	})
	if _, err := viaSaturated.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("%s after its slow requests ended: %v", saturated.GatewayName, err)
	}
}
