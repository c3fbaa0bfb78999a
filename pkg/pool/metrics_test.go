package pool

import (
	"strings"
	"testing"

	"k8s.io/component-base/metrics"
)

// The pool's collector reports its own counters, and no per-cluster or
// per-path labels.
func TestMetricsRegistered(t *testing.T) {
	u := newUpstream(t)
	p := newTestPool(t, Config{})
	reg := metrics.NewKubeRegistry()
	p.Metrics().Register(reg)
	l := acquire(t, p, u.target(t, "metrics", "client"))
	mustGet(t, l.Transport(), u.url, "/hello")
	l.Release()
	p.Remove("metrics", ReasonDeleted)

	families, err := reg.Gather()
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
		"cluster_gateway_pool_dials_refused_total":     false,
		"cluster_gateway_pool_address_failovers_total": false,
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
				if (name != "cluster_gateway_pool_entry_retirements_total" && name != "cluster_gateway_pool_dials_refused_total") || lp.GetName() != "reason" {
					t.Errorf("%s has label %s", name, lp.GetName())
				}
			}
			if name == "cluster_gateway_pool_entry_creations_total" && m.GetCounter().GetValue() != 1 {
				t.Errorf("%s = %v, want 1", name, m.GetCounter().GetValue())
			}
			if name == "cluster_gateway_pool_entry_retirements_total" && m.GetLabel()[0].GetValue() == ReasonDeleted && m.GetCounter().GetValue() != 1 {
				t.Errorf("%s{reason=deleted} = %v, want 1", name, m.GetCounter().GetValue())
			}
		}
	}
	for name, seen := range want {
		if !seen {
			t.Errorf("metric %s not gathered", name)
		}
	}
}

// cluster_gateway_pool_address_failovers_total counts the requests moved to
// another address after their connection to one failed, without labels:
// of ten requests to a cluster whose second address refuses connections,
// one dials it and goes to the first.
func TestAddressFailoversMetric(t *testing.T) {
	s := newAPIServers(t, "127.0.0.1", "127.0.0.2")
	s.srvs[1].Close()
	p := newTestPool(t, Config{})
	reg := metrics.NewKubeRegistry()
	p.Metrics().Register(reg)
	l := acquire(t, p, s.target(t, "ha"))
	for range 10 {
		mustGet(t, l.Transport(), s.urls[0], "/hello")
	}
	l.Release()

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []float64
	for _, f := range families {
		if f.GetName() != "cluster_gateway_pool_address_failovers_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != 0 {
				t.Errorf("%s has labels %v", f.GetName(), m.GetLabel())
			}
			got = append(got, m.GetCounter().GetValue())
		}
	}
	if len(got) != 1 || got[0] != 1 {
		t.Fatalf("cluster_gateway_pool_address_failovers_total: %v, want one series at 1", got)
	}
}
