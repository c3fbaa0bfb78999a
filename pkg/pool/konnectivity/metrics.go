package konnectivity

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

const (
	metricsNamespace = "cluster_gateway"
	metricsSubsystem = "konnectivity"
)

var (
	openTunnelsGauge = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "open_tunnels",
		Help: "Tunnels (gRPC connections) to the proxy-server that are open, including retiring ones.", StabilityLevel: metrics.ALPHA,
	})
	tunnelBuildsTotal = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "tunnel_builds_total",
		Help: "Tunnel build attempts.", StabilityLevel: metrics.ALPHA,
	})
	tunnelBuildFailuresTotal = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "tunnel_build_failures_total",
		Help: "Tunnel build attempts that failed.", StabilityLevel: metrics.ALPHA,
	})
	dialDurationSeconds = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "dial_duration_seconds",
		Help: "Duration of dials through the tunnel, failed ones included.", StabilityLevel: metrics.ALPHA,
		Buckets: metrics.ExponentialBuckets(0.0005, 2, 16),
	})
	dialFailuresTotal = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "dial_failures_total",
		Help: "Dials through the tunnel that failed.", StabilityLevel: metrics.ALPHA,
	})
	rotationsTotal = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "rotations_total",
		Help: "Times a tunnel built from new mTLS material replaced the previous one.", StabilityLevel: metrics.ALPHA,
	})
	// Gauge, not counter: a rebuild loop that leaks or multiplies
	// connections shows up here, and "exactly one" is what we promise.
	proxyConnectionsGauge = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "proxy_connections",
		Help: "TCP connections open to the proxy-server (one per open tunnel).", StabilityLevel: metrics.ALPHA,
	})
	rejectedReloadsTotal = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem, Name: "rejected_reloads_total",
		Help: "Changed mTLS files that were unusable and ignored (the last good material was kept).", StabilityLevel: metrics.ALPHA,
	})
)

var registerOnce sync.Once

// registerMetrics registers once per process however many Managers exist.
func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(openTunnelsGauge, tunnelBuildsTotal, tunnelBuildFailuresTotal,
			dialDurationSeconds, dialFailuresTotal, rotationsTotal, rejectedReloadsTotal, proxyConnectionsGauge)
	})
}
