package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	endpointsmetrics "k8s.io/apiserver/pkg/endpoints/metrics"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/clustergateway/cluster-gateway/internal/testfrontend"
	"github.com/clustergateway/cluster-gateway/internal/testmetrics"
	"github.com/clustergateway/cluster-gateway/internal/testpoll"
)

// timedConnecter puts the generic server's timeout filter between the front
// end and the proxy, exempting what the gateway's handler chain exempts
// (pkg/apiserver), with the deadline that the server's request-deadline
// filter sets: the gateway's own handler chain for ordinary requests.
type timedConnecter struct {
	px      *Proxy
	timeout time.Duration
}

func (c timedConnecter) Serve(w http.ResponseWriter, r *http.Request, name, subpath string) {
	h := genericfilters.WithTimeoutForNonLongRunningRequests(c.px.Handler(name, subpath), func(r *http.Request, ri *apirequest.RequestInfo) bool {
		return IsProxyRequest(ri) || IsLongRunning(r, ri)
	})
	ctx, cancel := context.WithTimeout(r.Context(), c.timeout)
	defer cancel()
	h.ServeHTTP(w, r.WithContext(ctx))
}

// An ordinary request that outlives the request timeout is answered with
// the server's 504 Timeout Status, every time, by the proxy itself (the
// timeout filter leaves proxied requests alone): never a reset stream,
// which the hub's aggregator would turn into a bare 503 "the server is
// currently unable to handle the request").
func TestRequestTimeoutIsAlways504(t *testing.T) {
	release := make(chan struct{})
	up := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // like a kubelet that does not answer
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer close(release)
	// The dial timeout is far beyond the request timeout: what is tested is
	// the request's deadline. With the fixture's 2s, a TLS handshake to the
	// local upstream that outlasted it (CI at a load average of 20 on 2
	// CPUs) failed the requests waiting for it with a dial timeout's 503,
	// which is right for a dial timeout, and not this test's subject.
	px := newFixtureProxyWith(t, func(o *Config) { o.Pool = newTestPool(t, 4, time.Minute, nil) },
		tokenSecret("slow", up.URL, upstreamCA(up), "t", "None"))
	endpointsmetrics.Register() // the generic server's request metrics, as the server registers them
	terminated := func() float64 {
		m, err := testmetrics.Gather(legacyregistry.DefaultGatherer)
		if err != nil {
			t.Fatal(err)
		}
		return m.Sum("apiserver_request_terminations_total")
	}
	terminatedBefore := terminated()
	reg := metrics.NewKubeRegistry()
	px.Metrics().Register(reg)
	const timeout = 50 * time.Millisecond
	srv := testfrontend.MustStart(t, testfrontend.Handler(timedConnecter{px: px, timeout: timeout}, &user.DefaultInfo{Name: "admin"}))
	c := srv.Client() // HTTP/2, as the hub's aggregator talks to the gateway
	defer c.CloseIdleConnections()

	const requests = 200
	var wg sync.WaitGroup
	errs := make(chan error, requests)
	for i := range requests {
		wg.Go(func() {
			url := srv.ProxyURL("slow") + fmt.Sprintf("/api/v1/namespaces/default/pods/p%d/log", i)
			start := time.Now()
			resp, err := c.Get(url)
			if err != nil {
				errs <- fmt.Errorf("request %d: no answer (%v)", i, err)
				return
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				errs <- fmt.Errorf("request %d: the answer (%d) was cut: %v", i, resp.StatusCode, err)
				return
			}
			var st metav1.Status
			if resp.StatusCode != http.StatusGatewayTimeout || json.Unmarshal(body, &st) != nil || st.Code != http.StatusGatewayTimeout || st.Reason != metav1.StatusReasonTimeout {
				errs <- fmt.Errorf("request %d: %d %s, want the 504 Timeout Status", i, resp.StatusCode, body)
				return
			}
			if d := time.Since(start); d < timeout {
				errs <- fmt.Errorf("request %d: answered after %s, before the %s timeout", i, d, timeout)
			}
		})
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 5 {
			t.Error(err)
		}
	}
	if n > 0 {
		t.Errorf("%d of %d requests that outlived the timeout did not get the 504 Timeout Status", n, requests)
	}
	// The proxy's own metrics count them as the 504s the clients received.
	testpoll.Eventually(t, 10*time.Second, "the proxy counts every timed-out request as a 504", func() error {
		m, err := testmetrics.Gather(reg)
		if err != nil {
			return err
		}
		if got := m[`cluster_gateway_proxy_requests_total{code="504",kind="request"}`]; got != requests {
			return fmt.Errorf("%v counted as 504 of %d; all: %v", got, requests, m)
		}
		return nil
	})
	// And the server's own count of requests its timeout ended, as the
	// timeout filter counts those it answers.
	if got := terminated() - terminatedBefore; got != requests {
		t.Errorf("apiserver_request_terminations_total grew by %v, want %d (one per timed-out request)", got, requests)
	}
}
