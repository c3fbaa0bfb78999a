package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
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
