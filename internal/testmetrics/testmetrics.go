// Package testmetrics reads Prometheus metrics in tests, from a /metrics
// endpoint's text or from a registry, into one flat map: what a test
// compares is a number per sample.
package testmetrics

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
)

// Samples maps a sample, written `name{label="value",...}` (labels sorted by
// name, as client_golang exports them; `name` alone without labels), to its
// value. A histogram is its name_bucket{le=...}, name_sum and name_count
// samples; a summary its quantiles, name_sum and name_count.
type Samples map[string]float64

// Sum adds the samples of name over all its label sets.
func (s Samples) Sum(name string) float64 {
	sum := 0.0
	for k, v := range s {
		if k == name || strings.HasPrefix(k, name+"{") {
			sum += v
		}
	}
	return sum
}

// Has says whether any sample of name is exported.
func (s Samples) Has(name string) bool {
	for k := range s {
		if k == name || strings.HasPrefix(k, name+"{") {
			return true
		}
	}
	return false
}

// Parse reads the Prometheus text format.
func Parse(r io.Reader) (Samples, error) {
	families, err := testutil.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing metrics: %w", err)
	}
	fs := make([]*dto.MetricFamily, 0, len(families))
	for _, f := range families {
		fs = append(fs, f)
	}
	return FromFamilies(fs), nil
}

// Scrape GETs url with c and parses what it answers.
func Scrape(c *http.Client, url string) (Samples, error) {
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return Parse(resp.Body)
}

// Gather reads what a registry holds now.
func Gather(g metrics.Gatherer) (Samples, error) {
	fs, err := g.Gather()
	if err != nil {
		return nil, err
	}
	return FromFamilies(fs), nil
}

// FromFamilies flattens metric families into samples.
func FromFamilies(families []*dto.MetricFamily) Samples {
	out := Samples{}
	for _, f := range families {
		name := f.GetName()
		for _, m := range f.GetMetric() {
			labels := m.GetLabel()
			switch {
			case m.GetCounter() != nil:
				out[key(name, labels)] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[key(name, labels)] = m.GetGauge().GetValue()
			case m.GetUntyped() != nil:
				out[key(name, labels)] = m.GetUntyped().GetValue()
			case m.GetHistogram() != nil:
				h := m.GetHistogram()
				out[key(name+"_count", labels)] = float64(h.GetSampleCount())
				out[key(name+"_sum", labels)] = h.GetSampleSum()
				for _, b := range h.GetBucket() {
					out[key(name+"_bucket", labels, "le", strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64))] = float64(b.GetCumulativeCount())
				}
			case m.GetSummary() != nil:
				s := m.GetSummary()
				out[key(name+"_count", labels)] = float64(s.GetSampleCount())
				out[key(name+"_sum", labels)] = s.GetSampleSum()
				for _, q := range s.GetQuantile() {
					out[key(name, labels, "quantile", strconv.FormatFloat(q.GetQuantile(), 'g', -1, 64))] = q.GetValue()
				}
			}
		}
	}
	return out
}

// key writes name{labels} with the labels (and one more, if given) sorted by name.
func key(name string, labels []*dto.LabelPair, extra ...string) string {
	pairs := make([][2]string, 0, len(labels)+1)
	for _, l := range labels {
		pairs = append(pairs, [2]string{l.GetName(), l.GetValue()})
	}
	if len(extra) == 2 {
		pairs = append(pairs, [2]string{extra[0], extra[1]})
	}
	if len(pairs) == 0 {
		return name
	}
	sort.Slice(pairs, func(i, j int) bool { return pairs[i][0] < pairs[j][0] })
	var b strings.Builder
	b.WriteString(name)
	b.WriteByte('{')
	for i, p := range pairs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(p[0])
		b.WriteString(`="`)
		b.WriteString(escaper.Replace(p[1]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// escaper escapes a label value as the text format does.
var escaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
