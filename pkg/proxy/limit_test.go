package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clustergateway/cluster-gateway/internal/testpoll"
	"github.com/clustergateway/cluster-gateway/pkg/fairness"
)

// Over real HTTP/2, through the proxy handler: a cluster whose ordinary
// slots and queue are full answers 429 with Retry-After and a Status naming
// it, while another cluster answers at once and a watch on the saturated
// cluster still gets its own slot; afterwards the limiter holds nothing.
func TestSaturatedClusterThroughTheProxy(t *testing.T) {
	unblock := make(chan struct{})
	var unblockOnce sync.Once
	release := func() { unblockOnce.Do(func() { close(unblock) }) }
	slow := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") != "true" {
			select {
			case <-unblock:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{}`)
	}))
	fast := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{}`)
	}))
	t.Cleanup(release) // before the upstreams close: they wait for their handlers

	lim, err := fairness.New(fairness.Config{MaxRequests: 2, MaxStreams: 1, MaxQueued: 1, QueueWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	px := newFixtureProxyWith(t, func(o *Config) { o.Limiter = lim },
		tokenSecret("slow", slow.URL, upstreamCA(slow), "t", "None"),
		tokenSecret("fast", fast.URL, upstreamCA(fast), "t", "None"))
	srv := proxyServer(t, px, alice, true)
	client := srv.Client()
	get := func(ctx context.Context, path string) (*http.Response, []byte, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		req.Header.Set("Accept", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp, body, err
	}

	// Two in flight and one queued: cluster "slow" is saturated.
	codes := make(chan int, 3)
	for range 3 {
		go func() {
			resp, _, err := get(context.Background(), "/slow/proxy/api/v1/namespaces/default/pods/p/log")
			if err != nil {
				codes <- 0
				return
			}
			codes <- resp.StatusCode
		}()
	}
	testpoll.EventuallyTrue(t, 30*time.Second, "two requests in flight to slow and one queued", func() bool {
		s := lim.Stats()
		return s.InFlight[fairness.Request] == 2 && s.Queued[fairness.Request] == 1
	})

	if resp, body, err := get(context.Background(), "/fast/proxy/api/v1/namespaces"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("another cluster while slow is saturated: %v %v %s", err, resp, body)
	}
	resp, body, err := get(context.Background(), "/slow/proxy/api/v1/namespaces")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("saturated cluster: %d Retry-After %q %s, want 429 with Retry-After 1 (no slot given back yet)", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	var st metav1.Status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("429 body is not a Status: %v: %s", err, body)
	}
	if st.Reason != metav1.StatusReasonTooManyRequests || st.Details == nil || st.Details.Name != "slow" ||
		st.Details.RetryAfterSeconds != 1 || !strings.Contains(st.Message, `cluster "slow"`) || !strings.Contains(st.Message, "--max-requests-per-cluster") {
		t.Fatalf("429 Status %+v, want TooManyRequests naming cluster slow and --max-requests-per-cluster", st)
	}
	if resp, body, err := get(context.Background(), "/slow/proxy/api/v1/namespaces/default/pods?watch=true"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a watch on the saturated cluster (long-running slots are its own): %v %v %s", err, resp, body)
	}

	release()
	for range 3 {
		if code := <-codes; code != http.StatusOK {
			t.Fatalf("a held or queued request to slow ended with %d, want 200 once slow answers", code)
		}
	}
	testpoll.EventuallyTrue(t, 30*time.Second, "the limiter to forget both clusters", func() bool { return lim.Stats().Clusters == 0 })
}
