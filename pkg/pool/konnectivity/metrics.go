package konnectivity

import (
	"k8s.io/component-base/metrics"
)

// Metrics are a Manager's: its counters (Stats) read at scrape time, so each
// figure is kept once, and the duration of its dials.
type Metrics struct {
	collector    *collector
	dialDuration *metrics.Histogram
}

func newMetrics(m *Manager) *Metrics {
	d := func(name, help string) *metrics.Desc {
		return metrics.NewDesc("cluster_gateway_konnectivity_"+name, help, nil, nil, metrics.ALPHA, "")
	}
	return &Metrics{
		collector: &collector{m: m,
			openTunnels:     d("open_tunnels", "Tunnels (gRPC connections) to the proxy-server that are open, including retiring ones."),
			builds:          d("tunnel_builds_total", "Tunnel build attempts."),
			buildFailures:   d("tunnel_build_failures_total", "Tunnel build attempts that failed."),
			dialFailures:    d("dial_failures_total", "Dials through the tunnel that failed."),
			rotations:       d("rotations_total", "Times a tunnel built from new mTLS material replaced the previous one."),
			rejectedReloads: d("rejected_reloads_total", "Changed mTLS files that were unusable and ignored (the last good material was kept)."),
			// A gauge, not a counter: a rebuild loop that leaks or multiplies
			// connections shows here, and "exactly one" is what we promise.
			proxyConns: d("proxy_connections", "TCP connections open to the proxy-server (one per open tunnel)."),
		},
		dialDuration: metrics.NewHistogram(&metrics.HistogramOpts{
			Namespace: "cluster_gateway", Subsystem: "konnectivity", Name: "dial_duration_seconds",
			Help: "Duration of dials through the tunnel, failed ones included.", StabilityLevel: metrics.ALPHA,
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
	m                                                                                        *Manager
	openTunnels, builds, buildFailures, dialFailures, rotations, rejectedReloads, proxyConns *metrics.Desc
}

func (c *collector) DescribeWithStability(ch chan<- *metrics.Desc) {
	for _, d := range []*metrics.Desc{c.openTunnels, c.builds, c.buildFailures, c.dialFailures, c.rotations, c.rejectedReloads, c.proxyConns} {
		ch <- d
	}
}

func (c *collector) CollectWithStability(ch chan<- metrics.Metric) {
	s := c.m.Stats()
	emit := func(d *metrics.Desc, t metrics.ValueType, v int64) {
		ch <- metrics.NewLazyConstMetric(d, t, float64(v))
	}
	emit(c.openTunnels, metrics.GaugeValue, s.OpenTunnels)
	emit(c.builds, metrics.CounterValue, s.TunnelBuilds)
	emit(c.buildFailures, metrics.CounterValue, s.TunnelBuildFailures)
	emit(c.dialFailures, metrics.CounterValue, s.DialFailures)
	emit(c.rotations, metrics.CounterValue, s.Rotations)
	emit(c.rejectedReloads, metrics.CounterValue, s.RejectedReloads)
	emit(c.proxyConns, metrics.GaugeValue, s.OpenProxyConns)
}
