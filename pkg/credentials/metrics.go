package credentials

import (
	"time"

	"k8s.io/component-base/metrics"
)

// Metrics are the providers' runs and their duration, by provider (the
// rotations and source errors of every source kind are pkg/gateways'
// Metrics). Labels are bounded: providers are the operator's, never
// cluster names.
type Metrics struct {
	providerCalls *metrics.CounterVec
	duration      *metrics.HistogramVec
	backoff       *metrics.CounterVec
	reloads       *metrics.CounterVec
	reloadOK      *metrics.Gauge
}

func newMetrics() *Metrics {
	return &Metrics{
		providerCalls: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: "cluster_gateway", Subsystem: "credential", Name: "provider_calls_total",
			Help:           "Credential provider runs seen by their outcome (ok: a new credential; failed, timeout, malformed), by provider. A run that returns the credential it returned before is not told from client-go's cache and not counted.",
			StabilityLevel: metrics.ALPHA,
		}, []string{"provider", "result"}),
		duration: metrics.NewHistogramVec(&metrics.HistogramOpts{
			Namespace: "cluster_gateway", Subsystem: "credential", Name: "provider_duration_seconds",
			Help:    "Duration of the credential provider runs counted by cluster_gateway_credential_provider_calls_total, by provider.",
			Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}, StabilityLevel: metrics.ALPHA,
		}, []string{"provider"}),
		backoff: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: "cluster_gateway", Subsystem: "credential", Name: "provider_backoff_total",
			Help:           "Provider runs not made because the provider's last run for the gateway failed, or did not replace a credential the cluster refused, less than its backoff ago (1s, doubled by each failure in a row up to 1m): the request or 401 had the latest state instead. Concurrent requests that would share one run count once. By provider.",
			StabilityLevel: metrics.ALPHA,
		}, []string{"provider"}),
		reloads: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: "cluster_gateway", Subsystem: "credential", Name: "providers_file_reloads_total",
			Help:           "Changes of --credential-providers-file seen, by result: success (reloaded), failure (unreadable or not valid: the last good configuration stays).",
			StabilityLevel: metrics.ALPHA,
		}, []string{"result"}),
		reloadOK: metrics.NewGauge(&metrics.GaugeOpts{
			Namespace: "cluster_gateway", Subsystem: "credential", Name: "providers_file_last_reload_successful",
			Help:           "1 when the gateway runs the current content of --credential-providers-file, 0 when its last change could not be loaded (the last good configuration is in use).",
			StabilityLevel: metrics.ALPHA,
		}),
	}
}

// Register adds the metrics to r (the server's registry).
func (m *Metrics) Register(r metrics.KubeRegistry) {
	r.MustRegister(m.providerCalls, m.duration, m.backoff, m.reloads, m.reloadOK)
}

func (m *Metrics) providerCall(provider, result string, d time.Duration) {
	m.providerCalls.WithLabelValues(provider, result).Inc()
	m.duration.WithLabelValues(provider).Observe(d.Seconds())
}

func (m *Metrics) backedOff(provider string) {
	m.backoff.WithLabelValues(provider).Inc()
}

func (m *Metrics) reloaded(ok bool) {
	if ok {
		m.reloads.WithLabelValues("success").Inc()
		m.reloadOK.Set(1)
		return
	}
	m.reloads.WithLabelValues("failure").Inc()
	m.reloadOK.Set(0)
}
