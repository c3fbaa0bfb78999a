package main

import (
	"strings"
	"testing"
	"time"
)

// The A/B section judges each piece from the run: the ratio of its hub
// CPU per request to the baseline's against the 5% bar.
func TestABSectionJudgesEachPiece(t *testing.T) {
	res := func(cpu time.Duration) map[string]*loadResult {
		return map[string]*loadResult{
			"hub":  {Requests: 100, CPU: map[string]time.Duration{"gateway": 100 * cpu}, Lat: []time.Duration{time.Millisecond}},
			"port": {Requests: 100, CPU: map[string]time.Duration{"gateway": 100 * cpu}, Lat: []time.Duration{time.Millisecond}},
		}
	}
	r := &report{AB: &abResultSet{Conc: 8, Per: time.Second, Round: 2, Rows: []*abRow{
		{Variant: abVariant{Key: "baseline"}, Res: res(500 * time.Microsecond)},
		{Variant: abVariant{Key: "cheap"}, Res: res(510 * time.Microsecond)},
		{Variant: abVariant{Key: "dear"}, Res: res(600 * time.Microsecond)},
		{Variant: abVariant{Key: "on", Cost: true}, Res: res(530 * time.Microsecond)},
	}}}
	out, err := render("ab", r.AB)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| cheap |", "1.02×", "| dear |", "1.20×",
		"- cheap (): 1.02× through the hub, below the bar",
		"- dear (): 1.20× through the hub, at or above the bar.",
		"- on (): 1.06× through the hub, what switching it on costs over the defaults",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the section lacks %q:\n%s", want, out)
		}
	}
}
