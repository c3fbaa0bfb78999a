package konnectivity

import (
	"k8s.io/component-base/metrics"
)

// Metrics are a Manager's: its counters (Stats, per proxy-server where they
// are a proxy-server's, labelled server="host:port") read at scrape time, so
// each figure is kept once, and the duration of its dials.
type Metrics struct {
	collector    *collector
	dialDuration *metrics.Histogram
}

func newMetrics(m *Manager) *Metrics {
	d := func(name, help string, labels ...string) *metrics.Desc {
		return metrics.NewDesc("cluster_gateway_konnectivity_"+name, help, labels, nil, metrics.ALPHA, "")
	}
	const server = "server"
	return &Metrics{
		collector: &collector{m: m,
			openTunnels:     d("open_tunnels", "Tunnels (gRPC connections) to the proxy-server that are open, including retiring ones.", server),
			upTunnels:       d("tunnel_up", "1 while a healthy tunnel to the proxy-server takes new dials, else 0.", server),
			builds:          d("tunnel_builds_total", "Tunnel build attempts.", server),
			buildFailures:   d("tunnel_build_failures_total", "Tunnel build attempts that failed.", server),
			healthFailures:  d("health_check_failures_total", "Tunnels closed because the proxy-server did not answer a health check in time.", server),
			rotations:       d("rotations_total", "Times a tunnel built from new mTLS material replaced the previous one.", server),
			proxyConns:      d("proxy_connections", "TCP connections open to the proxy-server (one per open tunnel).", server),
			dialFailures:    d("dial_failures_total", "Dials through the tunnels that failed (after trying every healthy proxy-server)."),
			failovers:       d("dial_failovers_total", "Dials that failed on one proxy-server and were tried on another."),
			rejectedReloads: d("rejected_reloads_total", "Changed mTLS files that were unusable and ignored (the last good material was kept)."),
		},
		dialDuration: metrics.NewHistogram(&metrics.HistogramOpts{
			Namespace: "cluster_gateway", Subsystem: "konnectivity", Name: "dial_duration_seconds",
			Help: "Duration of dials through the tunnels, failed ones included.", StabilityLevel: metrics.ALPHA,
			Buckets: metrics.ExponentialBuckets(0.0005, 2, 16),
		}),
	}
}

// Register adds the metrics to r (the server's registry).
func (x *Metrics) Register(r metrics.KubeRegistry) {
	r.CustomMustRegister(x.collector)
	r.MustRegister(x.dialDuration)
}

type collector struct {
	metrics.BaseStableCollector
	m *Manager
	// per proxy-server
	openTunnels, upTunnels, builds, buildFailures, healthFailures, rotations, proxyConns *metrics.Desc
	// per Manager
	dialFailures, failovers, rejectedReloads *metrics.Desc
}

func (c *collector) DescribeWithStability(ch chan<- *metrics.Desc) {
	for _, d := range []*metrics.Desc{c.openTunnels, c.upTunnels, c.builds, c.buildFailures, c.healthFailures, c.rotations, c.proxyConns,
		c.dialFailures, c.failovers, c.rejectedReloads} {
		ch <- d
	}
}

func (c *collector) CollectWithStability(ch chan<- metrics.Metric) {
	emit := func(d *metrics.Desc, t metrics.ValueType, v int64, labels ...string) {
		ch <- metrics.NewLazyConstMetric(d, t, float64(v), labels...)
	}
	for _, s := range c.m.servers {
		st := s.stats()
		emit(c.openTunnels, metrics.GaugeValue, st.OpenTunnels, s.addr)
		emit(c.upTunnels, metrics.GaugeValue, st.UpTunnels, s.addr)
		emit(c.builds, metrics.CounterValue, st.TunnelBuilds, s.addr)
		emit(c.buildFailures, metrics.CounterValue, st.TunnelBuildFailures, s.addr)
		emit(c.healthFailures, metrics.CounterValue, st.HealthCheckFailures, s.addr)
		emit(c.rotations, metrics.CounterValue, st.Rotations, s.addr)
		// A gauge, not a counter: a rebuild loop that leaks or multiplies
		// connections shows here, and "one per open tunnel" is what we promise.
		emit(c.proxyConns, metrics.GaugeValue, st.OpenProxyConns, s.addr)
	}
	st := c.m.Stats()
	emit(c.dialFailures, metrics.CounterValue, st.DialFailures)
	emit(c.failovers, metrics.CounterValue, st.Failovers)
	emit(c.rejectedReloads, metrics.CounterValue, st.RejectedReloads)
}
