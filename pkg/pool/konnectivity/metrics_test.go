package konnectivity

import (
	"testing"

	"k8s.io/component-base/metrics"

	"github.com/clustergateway/cluster-gateway/internal/testmetrics"
)

// expectMetrics checks that each metric in reg is exported with at least
// the given value, summed over its label sets.
func expectMetrics(t *testing.T, reg metrics.KubeRegistry, atLeast map[string]float64) {
	t.Helper()
	got, err := testmetrics.Gather(reg)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range atLeast {
		if v, ok := got.Sum(name), got.Has(name); !ok || v < want {
			t.Errorf("metric %s = %v (exported: %v), want at least %v", name, v, ok, want)
		}
	}
	for _, name := range []string{"tunnel_build_failures_total", "dial_failures_total", "rotations_total", "rejected_reloads_total"} {
		if !got.Has("cluster_gateway_konnectivity_" + name) {
			t.Errorf("metric cluster_gateway_konnectivity_%s is not exported", name)
		}
	}
}
