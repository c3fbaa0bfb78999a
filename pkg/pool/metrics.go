package pool

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// No per-cluster or per-path labels: their cardinality is unbounded.
const (
	metricsNamespace = "cluster_gateway"
	metricsSubsystem = "pool"
)

var (
	liveEntries = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem,
		Name:           "entries",
		Help:           "Live cluster transport entries (not retiring).",
		StabilityLevel: metrics.ALPHA,
	})
	retiringEntries = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem,
		Name:           "retiring_entries",
		Help:           "Retired entries whose connections are not all closed yet.",
		StabilityLevel: metrics.ALPHA,
	})
	entryCreations = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem,
		Name:           "entry_creations_total",
		Help:           "Cluster transport entries created.",
		StabilityLevel: metrics.ALPHA,
	})
	entryRetirements = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem,
		Name:           "entry_retirements_total",
		Help:           "Cluster transport entries retired, by reason (evicted, idle, rotated, deleted, shutdown).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	activeStreams = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem,
		Name:           "active_streams",
		Help:           "Leases held by in-flight proxied requests and streams.",
		StabilityLevel: metrics.ALPHA,
	})
	openConnections = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem,
		Name:           "open_connections",
		Help:           "Connections to managed clusters dialed by the pool and not yet closed.",
		StabilityLevel: metrics.ALPHA,
	})
	connectionDials = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem,
		Name:           "connection_dials_total",
		Help:           "Connection dials to managed clusters (direct, proxied or tunneled).",
		StabilityLevel: metrics.ALPHA,
	})
	dialFailures = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: metricsNamespace, Subsystem: metricsSubsystem,
		Name:           "dial_failures_total",
		Help:           "Connection dials to managed clusters that failed (TLS handshake failures not included).",
		StabilityLevel: metrics.ALPHA,
	})
)

var registerOnce sync.Once

// Register adds the pool metrics to legacyregistry, which the apiserver
// serves on /metrics. Safe to call many times; New calls it, because
// component-base metrics ignore updates until registered.
func Register() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(
			liveEntries,
			retiringEntries,
			entryCreations,
			entryRetirements,
			activeStreams,
			openConnections,
			connectionDials,
			dialFailures,
		)
	})
}
