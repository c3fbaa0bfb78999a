package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
)

// fakeMetrics serves the prober's metrics as a gateway's /metrics would:
// probes made so far, and clusters still Unknown (unless absent).
func fakeMetrics(t *testing.T, probes, unknown *atomic.Int64, absent bool) *gatewayAdmin {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		p, u := probes.Add(100), unknown.Load()
		fmt.Fprintf(w, "%s{result=\"Reachable\"} %d\n", mProbes, p)
		if !absent {
			fmt.Fprintf(w, "%s{reachable=\"True\"} 5\n%s{reachable=\"Unknown\"} %d\n", mClusters, mClusters, u)
		}
		if u > 0 {
			unknown.Add(-1)
		}
	}))
	t.Cleanup(srv.Close)
	return &gatewayAdmin{env: &localenv.Env{Gateway: &localenv.Gateway{URL: srv.URL}}, client: srv.Client()}
}

// The scan waits until no cluster is Unknown, until n more probes were
// made, and refuses to wait for a metric the gateway does not have.
func TestScanWaitsForTheProber(t *testing.T) {
	ctx := context.Background()
	var probes, unknown atomic.Int64
	unknown.Store(2)
	gw := fakeMetrics(t, &probes, &unknown, false)
	if _, err := waitAllProbed(ctx, gw); err != nil || unknown.Load() != 0 {
		t.Fatalf("waitAllProbed: %v with %d Unknown, want it to return once none is", err, unknown.Load())
	}
	before := probes.Load()
	if _, err := waitProbeRound(ctx, gw, 150); err != nil || probes.Load()-before < 250 {
		t.Fatalf("waitProbeRound: %v after %d probes, want at least 150 more than its first reading", err, probes.Load()-before)
	}
	if _, err := waitAllProbed(ctx, fakeMetrics(t, &probes, &unknown, true)); err == nil || !strings.Contains(err.Error(), mClusters) {
		t.Fatalf("waitAllProbed without %s: %v, want an error naming it", mClusters, err)
	}
}

// Each phase reads its own peak RSS (VmHWM reset as it begins), and the
// scan's peak is the most of them all: a phase before the passes whose
// peak is the highest (here the stored row's forced GCs) decides it.
func TestScanPeakIsTheMostOfEachPhase(t *testing.T) {
	const mb = 1 << 20
	s := &scanResult{StartPeak: 90 * mb, CreatePeak: 250 * mb, StoredPeak: 295 * mb, FillPeak: 280 * mb,
		Passes: []scanPass{{PeakRSS: 285 * mb}, {PeakRSS: 290 * mb}}}
	if p := s.PeakRSS(); p != 295*mb {
		t.Fatalf("peak RSS %.1f MiB, want the stored row's 295 MiB", p/mb)
	}
	s.StoredPeak = 0
	if p := s.PeakRSS(); p != 290*mb {
		t.Fatalf("peak RSS %.1f MiB, want pass 2's 290 MiB", p/mb)
	}
}
