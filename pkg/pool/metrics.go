package pool

import (
	"k8s.io/component-base/metrics"
)

// Metrics are the pool's counters (Stats) as metrics, read at scrape time:
// each figure is kept once, by the pool. No per-cluster or per-path labels:
// their cardinality is unbounded.
type Metrics struct{ collector *collector }

// Metrics returns the pool's metrics, for the server to Register once.
func (p *Pool) Metrics() *Metrics {
	return &Metrics{collector: &collector{p: p, descs: newDescs()}}
}

// Register adds the metrics to r (the server's registry).
func (m *Metrics) Register(r metrics.KubeRegistry) {
	r.CustomMustRegister(m.collector)
}

type descs struct {
	live, retiring, created, retired, streams, conns, dials, dialFailures, refused, failovers *metrics.Desc
}

func newDescs() descs {
	d := func(name, help string, labels ...string) *metrics.Desc {
		return metrics.NewDesc("cluster_gateway_pool_"+name, help, labels, nil, metrics.ALPHA, "")
	}
	return descs{
		live:         d("entries", "Live cluster transport entries (not retiring)."),
		retiring:     d("retiring_entries", "Retired entries whose connections are not all closed yet."),
		created:      d("entry_creations_total", "Cluster transport entries created."),
		retired:      d("entry_retirements_total", "Cluster transport entries retired, by reason (evicted, idle, rotated, deleted, shutdown).", "reason"),
		streams:      d("active_streams", "Leases held by in-flight proxied requests and streams."),
		conns:        d("open_connections", "Connections to managed clusters dialed by the pool and not yet closed."),
		dials:        d("connection_dials_total", "Connection dials to managed clusters (direct, proxied or tunneled)."),
		dialFailures: d("dial_failures_total", "Connection dials to managed clusters that failed (TLS handshake failures not included)."),
		failovers:    d("address_failovers_total", "Requests to a cluster with several addresses sent to another address after their connection to one failed (dial or TLS handshake; nothing of them had been sent)."),
		refused:      d("dials_refused_total", "Connection dials to managed clusters the pool refused because the cluster did not keep its connections, by reason (redials: one request had it dialed 4 times; capped: --pool-max-connections-per-cluster HTTP/2 connections open).", "reason"),
	}
}

type collector struct {
	metrics.BaseStableCollector
	p     *Pool
	descs descs
}

func (c *collector) DescribeWithStability(ch chan<- *metrics.Desc) {
	d := c.descs
	for _, x := range []*metrics.Desc{d.live, d.retiring, d.created, d.retired, d.streams, d.conns, d.dials, d.dialFailures, d.refused, d.failovers} {
		ch <- x
	}
}

func (c *collector) CollectWithStability(ch chan<- metrics.Metric) {
	s, d := c.p.Stats(), c.descs
	gauge := func(desc *metrics.Desc, v int64) {
		ch <- metrics.NewLazyConstMetric(desc, metrics.GaugeValue, float64(v))
	}
	counter := func(desc *metrics.Desc, v int64, labels ...string) {
		ch <- metrics.NewLazyConstMetric(desc, metrics.CounterValue, float64(v), labels...)
	}
	gauge(d.live, int64(s.Live))
	gauge(d.retiring, int64(s.Retiring))
	counter(d.created, s.Created)
	for _, r := range []string{ReasonEvicted, ReasonIdle, ReasonRotated, ReasonDeleted, ReasonUnusable, ReasonShutdown} {
		counter(d.retired, s.Retired[r], r)
	}
	gauge(d.streams, s.ActiveStreams)
	gauge(d.conns, s.OpenConns)
	counter(d.dials, s.Dials)
	counter(d.dialFailures, s.DialFailures)
	counter(d.failovers, s.AddressFailovers)
	for _, r := range []string{RefusedRedials, RefusedCapped} {
		counter(d.refused, s.RefusedDials[r], r)
	}
}
