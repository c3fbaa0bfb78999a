package proxy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"

	"github.com/clustergateway/cluster-gateway/internal/testpoll"
	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
	"github.com/clustergateway/cluster-gateway/pkg/health"
)

// A gateway whose address refuses connections and whose additional
// address answers: proxied requests all succeed (the one that dialed the
// refusing address went to the other), and the probe finds the cluster
// Reachable, showing each address's own outcome.
func TestAdditionalAddressServesWhenAddressIsDown(t *testing.T) {
	var served atomic.Int64
	up := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		_, _ = w.Write([]byte("ok"))
	}))
	down := closedAddress(t)
	s := tokenSecret("ha", down, upstreamCA(up), "t", "None")
	s.Data[gateways.KeyMoreEndpoints] = []byte(up.URL)
	px := newFixtureProxy(t, s)

	for i := range 4 {
		req := httptest.NewRequest(http.MethodGet, "/api", nil)
		if rec := serveAs(px, "ha", "/api", &user.DefaultInfo{Name: "alice"}, req); rec.Code != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	if served.Load() != 4 {
		t.Fatalf("the answering address served %d of 4 requests", served.Load())
	}

	out := px.ProbeCluster(context.Background(), "ha")
	if out.Reason != v1alpha1.ReasonReachable || len(out.Addresses) != 2 {
		t.Fatalf("probe: %s (%s), %d addresses; want Reachable with 2", out.Reason, out.Message, len(out.Addresses))
	}
	if a := out.Addresses[0]; a.Address != down || a.Reason != v1alpha1.ReasonDialFailed {
		t.Errorf("the refusing address: %+v, want DialFailed", a)
	}
	if a := out.Addresses[1]; a.Address != up.URL || a.Reason != v1alpha1.ReasonReachable {
		t.Errorf("the answering address: %+v, want Reachable", a)
	}
}

// The health subresource of a gateway with two addresses, one answering
// /readyz and one a closed port: healthy (any address is), with each
// address's own probe, the same outcomes the prober's probe finds.
func TestHealthShowsEachAddress(t *testing.T) {
	up := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	down := closedAddress(t)
	s := tokenSecret("ha", down, upstreamCA(up), "t", "None")
	s.Data[gateways.KeyMoreEndpoints] = []byte(up.URL)
	px := newFixtureProxy(t, s)

	h, err := px.Probe(context.Background(), "ha")
	if err != nil {
		t.Fatal(err)
	}
	if !h.Healthy || h.Code != http.StatusOK || h.Message != "" {
		t.Errorf("overall: healthy %v code %d message %q; want healthy, 200, no message", h.Healthy, h.Code, h.Message)
	}
	if len(h.Addresses) != 2 {
		t.Fatalf("addresses: %+v, want 2", h.Addresses)
	}
	if a := h.Addresses[0]; a.Address != down || a.Reachable || a.Reason != v1alpha1.ReasonDialFailed || a.Message == "" || a.Code != 0 || a.Latency != nil {
		t.Errorf("the closed port: %+v; want unreachable, DialFailed with a message, no code nor latency", a)
	}
	if a := h.Addresses[1]; a.Address != up.URL || !a.Reachable || a.Reason != v1alpha1.ReasonReachable || a.Message != "" || a.Code != http.StatusOK || a.Latency == nil || a.Latency.Duration <= 0 {
		t.Errorf("the answering address: %+v; want reachable, 200, with its latency", a)
	}

	// One address: no list, as before.
	one := newFixtureProxy(t, tokenSecret("one", up.URL, upstreamCA(up), "t", "None"))
	if h, err := one.Probe(context.Background(), "one"); err != nil || !h.Healthy || h.Addresses != nil {
		t.Errorf("one address: %+v %v; want healthy without addresses", h, err)
	}
}

// The prober's probe of each address reaches the pool: an address that
// accepts connections and serves requests but whose /readyz is not ready
// gets no requests once the prober has probed it, and gets them again once
// a probe finds it ready. (A dial that fails leaves an address out by
// itself, in the pool: this address never fails one, so only the probe's
// report can.)
func TestProbedAddressStatusReachesThePool(t *testing.T) {
	var ready atomic.Bool // the second address's /readyz
	served := make([]atomic.Int64, 2)
	apiServer := func(i int) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/readyz" && i == 1 && !ready.Load() {
				http.Error(w, "[-]etcd failed", http.StatusInternalServerError)
				return
			}
			if r.URL.Path != "/readyz" && r.URL.Path != "/version" {
				served[i].Add(1)
			}
			_, _ = w.Write([]byte("ok"))
		})
	}
	a, b := newTLSUpstream(t, apiServer(0)), newTLSUpstream(t, apiServer(1))
	s := tokenSecret("ha", a.URL, append(upstreamCA(a), upstreamCA(b)...), "t", "None")
	s.Data[gateways.KeyMoreEndpoints] = []byte(b.URL)
	// Probed often, so a probe always follows soon: what the test waits for
	// is the prober's first result and its first result after a change.
	hopts := health.Config{Interval: 50 * time.Millisecond, Timeout: 5 * time.Second, FailureThreshold: 1, SuccessThreshold: 1, MaxBackoff: 50 * time.Millisecond, Workers: 1}
	px, prober, err := newWiredProbed(t, startStore(t, fixtureNamespace, s),
		Config{Pool: newTestPool(t, 4, 2*time.Second, nil), Authorizer: authorizerfactory.NewAlwaysAllowAuthorizer()}, &hopts)
	if err != nil {
		t.Fatal(err)
	}
	get := func(n int) (first, second int64) {
		t.Helper()
		a0, b0 := served[0].Load(), served[1].Load()
		for i := range n {
			if rec := serveAs(px, "ha", "/api", &user.DefaultInfo{Name: "alice"}, httptest.NewRequest(http.MethodGet, "/api", nil)); rec.Code != http.StatusOK {
				t.Fatalf("request %d: %d %s", i, rec.Code, rec.Body)
			}
		}
		return served[0].Load() - a0, served[1].Load() - b0
	}
	// Before any probe both addresses take requests, in turn.
	if x, y := get(4); x != 2 || y != 2 {
		t.Fatalf("before a probe: %d and %d of 4 requests at the two addresses, want 2 and 2", x, y)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); prober.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	second := func(reason string) func() error {
		return func() error {
			r, ok := prober.Get("ha")
			if !ok || len(r.Addresses) != 2 {
				return fmt.Errorf("the prober knows %+v", r)
			}
			if got := r.Addresses[1].Reason; got != reason {
				return fmt.Errorf("the second address probed %s (%s), want %s", got, r.Addresses[1].Message, reason)
			}
			return nil
		}
	}
	testpoll.Eventually(t, 30*time.Second, "the prober finds the second address not ready", second(v1alpha1.ReasonHTTPError))
	if x, y := get(8); x != 8 || y != 0 {
		t.Errorf("after the prober found the second address not ready: %d and %d of 8 requests at the two addresses, want 8 and 0", x, y)
	}

	ready.Store(true)
	testpoll.Eventually(t, 30*time.Second, "the prober finds the second address ready", second(v1alpha1.ReasonReachable))
	if x, y := get(4); x != 2 || y != 2 {
		t.Errorf("after the prober found the second address ready again: %d and %d of 4 requests at the two addresses, want 2 and 2", x, y)
	}
}
