package scraped

import (
	"strings"
	"testing"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
)

// Each scrape reads the figures once and reports each under its name and
// type, with the value at its position.
func TestCollectorReportsWhatReadReturns(t *testing.T) {
	reads := 0
	values := []float64{3, 7}
	c := Collector("x_", []Metric{
		{Name: "done_total", Help: "Done.", Type: metrics.CounterValue},
		{Name: "held", Help: "Held.", Type: metrics.GaugeValue},
	}, func() []float64 { reads++; return values })
	reg := metrics.NewKubeRegistry()
	reg.CustomMustRegister(c)
	want := `# HELP x_done_total [ALPHA] Done.
# TYPE x_done_total counter
x_done_total 3
# HELP x_held [ALPHA] Held.
# TYPE x_held gauge
x_held 7
`
	if _, err := reg.Gather(); err != nil || reads != 1 {
		t.Fatalf("one scrape read the figures %d times (%v), want once", reads, err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	values = []float64{4, 0}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(strings.NewReplacer("x_done_total 3", "x_done_total 4", "x_held 7", "x_held 0").Replace(want))); err != nil {
		t.Errorf("a later scrape did not read the figures anew: %v", err)
	}
}
