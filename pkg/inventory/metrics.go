package inventory

import (
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/component-base/metrics"
)

// Metrics are the sync's: whether this replica leads, its writes and
// errors, the gateways synced from each inventory and the collisions
// (read at scrape time). Labels are bounded: no gateway or object names.
type Metrics struct {
	leader *metrics.Gauge
	writes *metrics.CounterVec
	errors *metrics.CounterVec
	gauges *gaugesCollector
}

func newMetrics(c *Controller) *Metrics {
	return &Metrics{
		leader: metrics.NewGauge(&metrics.GaugeOpts{
			Namespace: "cluster_gateway", Subsystem: "inventory", Name: "leader",
			Help:           "1 while this replica holds the inventory sync's Lease and syncs, else 0.",
			StabilityLevel: metrics.ALPHA,
		}),
		writes: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: "cluster_gateway", Subsystem: "inventory", Name: "writes_total",
			Help:           "Gateways this replica created, updated or deleted (operation) for an inventory (source: capi, clusterprofile).",
			StabilityLevel: metrics.ALPHA,
		}, []string{"source", "operation"}),
		errors: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: "cluster_gateway", Subsystem: "inventory", Name: "sync_errors_total",
			Help:           "Inventory objects this replica could not sync, by source and reason: InvalidSource (the object asks for a gateway that cannot be used; see the log) or WriteFailed (retried).",
			StabilityLevel: metrics.ALPHA,
		}, []string{"source", "reason"}),
		gauges: &gaugesCollector{c: c,
			gateways: metrics.NewDesc("cluster_gateway_inventory_gateways",
				"Gateways synced from each inventory (source), as this replica's cache has them.", []string{"source"}, nil, metrics.ALPHA, ""),
			collisions: metrics.NewDesc("cluster_gateway_inventory_collisions",
				"Inventory objects (by source) that get no gateway because one the sync does not own has their gateway's name (the leader's count; see its log).", []string{"source"}, nil, metrics.ALPHA, ""),
		},
	}
}

// Register adds the metrics to r (the server's registry).
func (m *Metrics) Register(r metrics.KubeRegistry) {
	r.MustRegister(m.leader, m.writes, m.errors)
	r.CustomMustRegister(m.gauges)
}

type gaugesCollector struct {
	metrics.BaseStableCollector
	c                    *Controller
	gateways, collisions *metrics.Desc
}

func (g *gaugesCollector) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- g.gateways
	ch <- g.collisions
}

func (g *gaugesCollector) CollectWithStability(ch chan<- metrics.Metric) {
	collisions := g.c.collisionsBySource()
	for _, src := range []Source{SourceCAPI, SourceClusterProfile} {
		if !g.c.cfg.Syncs(src) {
			continue
		}
		// The sync writes its label on every gateway it owns, and API writes
		// cannot remove it: the label narrows, the owner record decides.
		gws, _, _ := g.c.cfg.Store.List(labels.SelectorFromSet(labels.Set{LabelSyncedFrom: string(src)}))
		n := 0
		for _, gw := range gws {
			if o, ok := gw.Owner(); ok && o.Source == string(src) {
				n++
			}
		}
		ch <- metrics.NewLazyConstMetric(g.gateways, metrics.GaugeValue, float64(n), string(src))
		ch <- metrics.NewLazyConstMetric(g.collisions, metrics.GaugeValue, float64(collisions[src]), string(src))
	}
}
