package health

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// Metrics are the prober's: probes by result, their duration, and clusters
// and the addresses of clusters with several by Reachable status (read from
// the prober's state at scrape time). Labels are bounded: no cluster names,
// no addresses.
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
			"Clusters by their Reachable status (True, False, Unknown) as this gateway replica sees them.", []string{"reachable"}, nil, metrics.ALPHA, ""),
			addresses: metrics.NewDesc("cluster_gateway_health_addresses",
				"Addresses of clusters with additionalAddresses by their last probe (True: answered /readyz with 200, False: did not, Unknown: not probed since the gateway was created or changed, or the gateway is not Ready) as this gateway replica sees them.",
				[]string{"reachable"}, nil, metrics.ALPHA, "")},
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

// clustersCollector reports cluster_gateway_health_clusters and
// cluster_gateway_health_addresses.
type clustersCollector struct {
	metrics.BaseStableCollector
	p         *Prober
	desc      *metrics.Desc
	addresses *metrics.Desc
}

func (c *clustersCollector) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- c.desc
	ch <- c.addresses
}

func (c *clustersCollector) CollectWithStability(ch chan<- metrics.Metric) {
	counts, addrs := map[metav1.ConditionStatus]int{}, map[metav1.ConditionStatus]int{}
	c.p.records.EachProbeState(func(s *State) {
		s.mu.Lock()
		defer s.mu.Unlock()
		st := &s.s
		counts[st.result.Status]++
		if st.addresses < 2 {
			return
		}
		// The last probe's outcome at each address; none since the reset
		// (or the gateway is not Ready): Unknown.
		for _, a := range st.result.Addresses {
			if a.Reason == v1alpha1.ReasonReachable {
				addrs[metav1.ConditionTrue]++
			} else {
				addrs[metav1.ConditionFalse]++
			}
		}
		addrs[metav1.ConditionUnknown] += max(0, st.addresses-len(st.result.Addresses))
	})
	for _, s := range []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown} {
		ch <- metrics.NewLazyConstMetric(c.desc, metrics.GaugeValue, float64(counts[s]), string(s))
		ch <- metrics.NewLazyConstMetric(c.addresses, metrics.GaugeValue, float64(addrs[s]), string(s))
	}
}
