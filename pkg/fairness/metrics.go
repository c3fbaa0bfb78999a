package fairness

import (
	"time"

	"k8s.io/component-base/metrics"
)

// Metrics are the limiter's metrics, by kind (request, stream) and reason;
// never by cluster or caller: there may be thousands of each.
type Metrics struct {
	l         *Limiter
	queueWait *metrics.HistogramVec
}

func newMetrics(l *Limiter) *Metrics {
	return &Metrics{l: l, queueWait: metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      "cluster_gateway",
		Subsystem:      "fairness",
		Name:           "queue_wait_seconds",
		Help:           "Time proxied requests spent in their cluster's queue, by kind (request: ordinary; stream: watch, logs -f, exec, attach, port-forward); only requests that had to queue, whatever the outcome.",
		Buckets:        []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind"})}
}

// Register adds the metrics to r (the server's registry).
func (m *Metrics) Register(r metrics.KubeRegistry) {
	r.MustRegister(m.queueWait)
	r.CustomMustRegister(&collector{l: m.l, descs: newDescs()})
}

func (m *Metrics) observeWait(kind Kind, d time.Duration) {
	m.queueWait.WithLabelValues(kind.String()).Observe(d.Seconds())
}

type descs struct {
	inFlight, queued, saturated, clusters, rejected *metrics.Desc
}

func newDescs() descs {
	d := func(name, help string, labels ...string) *metrics.Desc {
		return metrics.NewDesc("cluster_gateway_fairness_"+name, help, labels, nil, metrics.ALPHA, "")
	}
	return descs{
		inFlight:  d("inflight_requests", "Proxied requests holding a per-cluster slot, by kind.", "kind"),
		queued:    d("queued_requests", "Proxied requests waiting in their cluster's queue, by kind.", "kind"),
		saturated: d("saturated_clusters", "Clusters with every slot of the kind taken (further requests queue).", "kind"),
		clusters:  d("tracked_clusters", "Clusters with a proxied request in flight or queued (each cluster's slots are in its record)."),
		rejected: d("rejected_requests_total", "Proxied requests that got no slot, by kind and reason: queue_full, timeout and user_share (the user held its share of the cluster's stream slots, --max-streams-per-user-per-cluster) were answered 429 with Retry-After; canceled ended while waiting (client gone or request timeout).",
			"kind", "reason"),
	}
}

// collector reads the limiter's Stats at scrape time.
type collector struct {
	metrics.BaseStableCollector
	l     *Limiter
	descs descs
}

func (c *collector) DescribeWithStability(ch chan<- *metrics.Desc) {
	d := c.descs
	for _, x := range []*metrics.Desc{d.inFlight, d.queued, d.saturated, d.clusters, d.rejected} {
		ch <- x
	}
}

func (c *collector) CollectWithStability(ch chan<- metrics.Metric) {
	s, d := c.l.Stats(), c.descs
	for _, k := range Kinds {
		kind := k.String()
		ch <- metrics.NewLazyConstMetric(d.inFlight, metrics.GaugeValue, float64(s.InFlight[k]), kind)
		ch <- metrics.NewLazyConstMetric(d.queued, metrics.GaugeValue, float64(s.Queued[k]), kind)
		ch <- metrics.NewLazyConstMetric(d.saturated, metrics.GaugeValue, float64(s.Saturated[k]), kind)
		for r := range numReasons {
			ch <- metrics.NewLazyConstMetric(d.rejected, metrics.CounterValue, float64(s.Refused[k][r]), kind, r.String())
		}
	}
	ch <- metrics.NewLazyConstMetric(d.clusters, metrics.GaugeValue, float64(s.Clusters))
}
