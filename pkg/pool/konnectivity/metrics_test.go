package konnectivity

import (
	"testing"

	"k8s.io/component-base/metrics"
)

// expectMetrics checks that each metric in reg is exported with at least
// the given value (a histogram's sample count).
func expectMetrics(t *testing.T, reg metrics.KubeRegistry, atLeast map[string]float64) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				got[f.GetName()] += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				got[f.GetName()] += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				got[f.GetName()] += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	for name, want := range atLeast {
		if v, ok := got[name]; !ok || v < want {
			t.Errorf("metric %s = %v (exported: %v), want at least %v", name, v, ok, want)
		}
	}
	for _, name := range []string{"tunnel_build_failures_total", "dial_failures_total", "rotations_total", "rejected_reloads_total"} {
		if _, ok := got["cluster_gateway_konnectivity_"+name]; !ok {
			t.Errorf("metric cluster_gateway_konnectivity_%s is not exported", name)
		}
	}
}
