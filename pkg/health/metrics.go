package health

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics"
)

// Metrics are the prober's: probes by result, their duration, and clusters by
// Reachable status (read from the prober's state at scrape time). Labels are
// bounded: no cluster names.
type Metrics struct {
	probes   *metrics.CounterVec
	duration *metrics.Histogram
	clusters *clustersCollector
}

func newMetrics(p *Prober) *Metrics {
	return &Metrics{
		probes: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: "cluster_gateway", Subsystem: "health", Name: "probes_total",
			Help:           "Probes of clusters' /readyz by result (Reachable, DialFailed, TLSFailed, HTTPError, NoAnswer, GatewayNotReady).",
			StabilityLevel: metrics.ALPHA,
		}, []string{"result"}),
		duration: metrics.NewHistogram(&metrics.HistogramOpts{
			Namespace: "cluster_gateway", Subsystem: "health", Name: "probe_duration_seconds",
			Help:    "Duration of probes, failed ones included (a failure within the dial timeout is fast; one that waits for an answer takes up to --probe-timeout).",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}, StabilityLevel: metrics.ALPHA,
		}),
		clusters: &clustersCollector{p: p, desc: metrics.NewDesc("cluster_gateway_health_clusters",
			"Clusters by their Reachable status (True, False, Unknown) as this gateway replica sees them.", []string{"reachable"}, nil, metrics.ALPHA, "")},
	}
}

// Register adds the metrics to r (the server's registry).
func (m *Metrics) Register(r metrics.KubeRegistry) {
	r.MustRegister(m.probes, m.duration)
	r.CustomMustRegister(m.clusters)
}

func (m *Metrics) observe(out Outcome, d time.Duration) {
	m.probes.WithLabelValues(out.Reason).Inc()
	m.duration.Observe(d.Seconds())
}

type clustersCollector struct {
	metrics.BaseStableCollector
	p    *Prober
	desc *metrics.Desc
}

func (c *clustersCollector) DescribeWithStability(ch chan<- *metrics.Desc) { ch <- c.desc }

func (c *clustersCollector) CollectWithStability(ch chan<- metrics.Metric) {
	counts := map[metav1.ConditionStatus]int{}
	c.p.mu.RLock()
	for _, st := range c.p.states {
		counts[st.result.Status]++
	}
	c.p.mu.RUnlock()
	for _, s := range []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown} {
		ch <- metrics.NewLazyConstMetric(c.desc, metrics.GaugeValue, float64(counts[s]), string(s))
	}
}
