package publish

import "k8s.io/component-base/metrics"

// Metrics are the publisher's: the reloads of --publish-hub-ca-file.
type Metrics struct {
	caReloads *metrics.CounterVec
	caOK      *metrics.Gauge
}

func newMetrics() *Metrics {
	return &Metrics{
		caReloads: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: "cluster_gateway", Subsystem: "publish", Name: "hub_ca_file_reloads_total",
			Help:           "Changes of --publish-hub-ca-file seen, by result: success (the new CA is published), failure (unreadable or not a PEM bundle of certificates only: the last good CA stays published).",
			StabilityLevel: metrics.ALPHA,
		}, []string{"result"}),
		caOK: metrics.NewGauge(&metrics.GaugeOpts{
			Namespace: "cluster_gateway", Subsystem: "publish", Name: "hub_ca_file_last_reload_successful",
			Help:           "1 when the publisher publishes the current content of --publish-hub-ca-file, 0 when its last change could not be loaded (the last good CA is published).",
			StabilityLevel: metrics.ALPHA,
		}),
	}
}

// Register adds the metrics to r (the server's registry).
func (m *Metrics) Register(r metrics.KubeRegistry) {
	r.MustRegister(m.caReloads, m.caOK)
}

func (m *Metrics) caReloaded(ok bool) {
	if ok {
		m.caReloads.WithLabelValues("success").Inc()
		m.caOK.Set(1)
		return
	}
	m.caReloads.WithLabelValues("failure").Inc()
	m.caOK.Set(0)
}
