package gateways

import (
	"k8s.io/component-base/metrics"
)

// Source kinds, the values of the source_kind label.
const (
	SourceKindSecret   = "Secret"
	SourceKindProvider = "Provider"
)

// Metrics are the credential sources': rotations seen, sources that could
// not be used, and the earliest expiry of a credential in use (read from
// the store at scrape time, for an alert). Labels are bounded: no cluster
// or Secret names.
type Metrics struct {
	rotations *metrics.CounterVec
	errors    *metrics.CounterVec
	expiry    *expiryCollector
}

func newMetrics(s *Store) *Metrics {
	return &Metrics{
		rotations: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: "cluster_gateway", Subsystem: "credential", Name: "rotations_total",
			Help:           "Credentials that changed at their source (a Secret's material, a provider's new credential), by source kind.",
			StabilityLevel: metrics.ALPHA,
		}, []string{"source_kind"}),
		errors: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: "cluster_gateway", Subsystem: "credential", Name: "source_errors_total",
			Help:           "Gateways found unusable because of their credential's source, by source kind and Ready reason (SourceNotFound, SourceNotAllowed, SourceMalformed, ProviderFailed), counted each time a gateway is resolved against a new version of its source.",
			StabilityLevel: metrics.ALPHA,
		}, []string{"source_kind", "reason"}),
		expiry: &expiryCollector{s: s, desc: metrics.NewDesc("cluster_gateway_credential_next_expiry_timestamp_seconds",
			"When the first credential of a Ready gateway expires (a certificate's notAfter, a JWT's exp, an ExecCredential's expirationTimestamp), in seconds since the epoch; absent when none has a known expiry. `kubectl get clustergateways -o wide` shows which.",
			nil, nil, metrics.ALPHA, "")},
	}
}

// Metrics are the store's, to register with the server's registry.
func (s *Store) Metrics() *Metrics { return s.metrics }

// Register adds the metrics to r.
func (m *Metrics) Register(r metrics.KubeRegistry) {
	r.MustRegister(m.rotations, m.errors)
	r.CustomMustRegister(m.expiry)
}

// Rotated counts a credential that changed at a source of kind.
func (m *Metrics) Rotated(kind string) { m.rotations.WithLabelValues(kind).Inc() }

// SourceFailed counts a gateway found unusable for reason.
func (m *Metrics) SourceFailed(kind, reason string) { m.errors.WithLabelValues(kind, reason).Inc() }

type expiryCollector struct {
	metrics.BaseStableCollector
	s    *Store
	desc *metrics.Desc
}

func (c *expiryCollector) DescribeWithStability(ch chan<- *metrics.Desc) { ch <- c.desc }

func (c *expiryCollector) CollectWithStability(ch chan<- metrics.Metric) {
	gws, _, _ := c.s.List(nil)
	var first float64
	for _, g := range gws {
		cred := g.Object.Status.Credential
		if !g.Ready || cred == nil || cred.ExpirationTime == nil {
			continue
		}
		if t := float64(cred.ExpirationTime.Unix()); first == 0 || t < first {
			first = t
		}
	}
	if first > 0 {
		ch <- metrics.NewLazyConstMetric(c.desc, metrics.GaugeValue, first)
	}
}
