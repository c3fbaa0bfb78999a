package fairness

import (
	"context"
	"testing"
	"time"

	"k8s.io/component-base/metrics"
)

// The metrics are by kind and reason only (no cluster, no caller), and
// report the limiter's own figures.
func TestMetrics(t *testing.T) {
	l := newLimiter(t, 1, 1, 1, time.Millisecond)
	reg := metrics.NewKubeRegistry()
	l.Metrics().Register(reg)
	held := mustAcquire(t, l, "c", "alice", Request)
	if _, err := l.Acquire(context.Background(), slotsOf(l, "c"), "bob", Request); err == nil {
		t.Fatal("want a timeout")
	}

	want := map[string]float64{
		`cluster_gateway_fairness_inflight_requests{kind="request"}`:                           1,
		`cluster_gateway_fairness_inflight_requests{kind="stream"}`:                            0,
		`cluster_gateway_fairness_queued_requests{kind="request"}`:                             0,
		`cluster_gateway_fairness_saturated_clusters{kind="request"}`:                          1,
		`cluster_gateway_fairness_tracked_clusters`:                                            1,
		`cluster_gateway_fairness_rejected_requests_total{kind="request",reason="timeout"}`:    1,
		`cluster_gateway_fairness_rejected_requests_total{kind="request",reason="queue_full"}`: 0,
		`cluster_gateway_fairness_queue_wait_seconds_count{kind="request"}`:                    1,
	}
	got := gather(t, reg)
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	held()
	if got := gather(t, reg); got[`cluster_gateway_fairness_tracked_clusters`] != 0 || got[`cluster_gateway_fairness_saturated_clusters{kind="request"}`] != 0 {
		t.Errorf("after release: %v", got)
	}
}

// gather flattens the registry into name{label="value",...} -> value, and
// fails on any label other than kind and reason.
func gather(t *testing.T, reg metrics.KubeRegistry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			key, sep := "", ""
			for _, lp := range m.GetLabel() {
				if lp.GetName() != "kind" && lp.GetName() != "reason" {
					t.Errorf("%s has label %s", f.GetName(), lp.GetName())
				}
				key += sep + lp.GetName() + `="` + lp.GetValue() + `"`
				sep = ","
			}
			if key != "" {
				key = "{" + key + "}"
			}
			switch {
			case m.GetHistogram() != nil:
				out[f.GetName()+"_count"+key] = float64(m.GetHistogram().GetSampleCount())
			case m.GetCounter() != nil:
				out[f.GetName()+key] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[f.GetName()+key] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}
