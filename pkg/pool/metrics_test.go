package pool

import (
	"strings"
	"testing"

	"k8s.io/component-base/metrics/legacyregistry"
)

// The metrics are in legacyregistry (what the apiserver serves on /metrics)
// and carry no per-cluster or per-path labels.
func TestMetricsRegistered(t *testing.T) {
	Register()
	Register() // guarded by sync.Once: no duplicate-registration panic
	u := newUpstream(t)
	p := newTestPool(t, Options{})
	l := acquire(t, p, u.target(t, "metrics", "client"))
	mustGet(t, l.Transport(), u.url, "/hello")
	l.Release()
	p.Remove("metrics")

	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{
		"cluster_gateway_pool_entries":                 false,
		"cluster_gateway_pool_retiring_entries":        false,
		"cluster_gateway_pool_entry_creations_total":   false,
		"cluster_gateway_pool_entry_retirements_total": false,
		"cluster_gateway_pool_active_streams":          false,
		"cluster_gateway_pool_open_connections":        false,
		"cluster_gateway_pool_connection_dials_total":  false,
		"cluster_gateway_pool_dial_failures_total":     false,
	}
	for _, f := range families {
		name := f.GetName()
		if !strings.HasPrefix(name, "cluster_gateway_pool_") {
			continue
		}
		if _, ok := want[name]; !ok {
			t.Errorf("unexpected metric %s", name)
			continue
		}
		want[name] = true
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if name != "cluster_gateway_pool_entry_retirements_total" || lp.GetName() != "reason" {
					t.Errorf("%s has label %s", name, lp.GetName())
				}
			}
			if name == "cluster_gateway_pool_entry_creations_total" && m.GetCounter().GetValue() < 1 {
				t.Errorf("%s = %v, want >= 1", name, m.GetCounter().GetValue())
			}
		}
	}
	for name, seen := range want {
		if !seen {
			t.Errorf("metric %s not gathered", name)
		}
	}
}
