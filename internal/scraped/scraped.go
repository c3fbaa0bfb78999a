// Package scraped exposes figures a component already keeps (counters,
// sizes) as metrics read when they are scraped, so that no figure is kept
// twice: once by the component and once by a metric.
package scraped

import "k8s.io/component-base/metrics"

// Metric is one unlabelled figure: its name after the collector's prefix,
// its help text and whether it is a counter or a gauge.
type Metric struct {
	Name, Help string
	Type       metrics.ValueType
}

// Collector reports metrics named prefix+Name, in the order given, with the
// values one call of read returns in that same order.
func Collector(prefix string, ms []Metric, read func() []float64) metrics.StableCollector {
	c := &collector{types: make([]metrics.ValueType, len(ms)), read: read}
	for _, m := range ms {
		c.descs = append(c.descs, metrics.NewDesc(prefix+m.Name, m.Help, nil, nil, metrics.ALPHA, ""))
		c.types[len(c.descs)-1] = m.Type
	}
	return c
}

type collector struct {
	metrics.BaseStableCollector
	descs []*metrics.Desc
	types []metrics.ValueType
	read  func() []float64
}

func (c *collector) DescribeWithStability(ch chan<- *metrics.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *collector) CollectWithStability(ch chan<- metrics.Metric) {
	for i, v := range c.read() {
		ch <- metrics.NewLazyConstMetric(c.descs[i], c.types[i], v)
	}
}
