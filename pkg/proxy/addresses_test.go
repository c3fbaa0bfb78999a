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
