package main

import (
	"strings"
	"testing"
	"time"
)

// fixtureFanout is a set of 100 clusters whose single lists took 100 to
// 199 ms, and whose default-page list holds growth bytes at its peak.
func fixtureFanout(growth float64, complete, firstRow time.Duration) *fanoutResult {
	r := &fanoutResult{Clusters: 100, Objects: 2000, ObjectBytes: 1024, Apiservers: 2, MaxClusters: 16, SingleBytes: 2000 * 1200, Loop16: 9 * time.Second}
	for i := range 100 {
		r.Singles = append(r.Singles, time.Duration(100+i)*time.Millisecond)
	}
	page := 2000 * 1200 / 2000.0 * 500 // 600,000 bytes
	r.Lists = []fanoutList{
		{Page: 500, FirstRow: firstRow, Complete: complete, Bytes: 100 * 2000 * 1250, Items: 200000, Base: 20 * miB, PeakHeap: 20*miB + growth, PageBytes: page},
		{Page: 100, FirstRow: firstRow / 2, Complete: complete, Bytes: 100 * 2000 * 1250, Items: 200000, Base: 20 * miB, PeakHeap: 20*miB + growth/5, PageBytes: page / 5},
	}
	return r
}

func goalsByName(gs []goal) map[string]goal {
	m := map[string]goal{}
	for _, g := range gs {
		switch {
		case strings.Contains(g.Goal, "complete list"):
			m["complete"] = g
		case strings.Contains(g.Goal, "first row"):
			m["first"] = g
		case strings.Contains(g.Goal, "peak heap"):
			m["heap"] = g
		}
	}
	return m
}

// The goals compare the set's list with the slowest and the fastest single
// list, and its peak heap with clusters × page size and the answer.
func TestFanoutGoals(t *testing.T) {
	if gs := (&report{}).fanoutGoals(); gs != nil {
		t.Fatalf("a report without the fan-out section judged %d fan-out goals, want none (the other sections' goldens stay as they are)", len(gs))
	}
	// Within every bound: complete 230 ms ≤ 1.2 × 199 ms, first row 105 ms
	// ≤ 1.1 × 100 ms, growth 60 MB = 1× clusters × page.
	r := &report{Fanout: fixtureFanout(60e6, 230*time.Millisecond, 105*time.Millisecond)}
	g := goalsByName(r.fanoutGoals())
	if len(g) != 3 {
		t.Fatalf("fan-out goals: %+v, want complete, first row and heap", g)
	}
	for name, want := range map[string]float64{"complete": 230.0 / 199, "first": 1.05, "heap": 1} {
		if got := g[name]; got.Missing != "" || !got.met() || got.Value < want-0.01 || got.Value > want+0.01 {
			t.Errorf("%s: %+v, want %.2f and met", name, got, want)
		}
	}
	// Over every bound: complete 10 s, first row 5 s; a growth as large as
	// the answer (250 MB) is bounded by objects, whatever the page says.
	r.Fanout = fixtureFanout(250e6, 10*time.Second, 5*time.Second)
	r.Fanout.Lists[0].PageBytes = 10e6 // 1 GB of pages: the growth is within it, but not below the answer
	g = goalsByName(r.fanoutGoals())
	for _, name := range []string{"complete", "first", "heap"} {
		if got := g[name]; got.Missing != "" || got.met() {
			t.Errorf("%s: %+v, want measured and not met", name, got)
		}
	}
	if r.Fanout.Bounded(r.Fanout.Lists[0]) {
		t.Error("Bounded: a peak growth as large as the answer counts as bounded by pages")
	}
	// Nothing listed: not measured, and said why.
	r.Fanout = &fanoutResult{Clusters: 100, Objects: 2000}
	for name, got := range goalsByName(r.fanoutGoals()) {
		if got.Missing == "" {
			t.Errorf("%s without any list: %+v, want not measured", name, got)
		}
	}
	r.Fanout = fixtureFanout(60e6, time.Second, time.Second)
	r.Fanout.Singles = nil
	if g := goalsByName(r.fanoutGoals()); g["complete"].Missing == "" || g["first"].Missing == "" || g["heap"].Missing != "" {
		t.Errorf("without single lists: %+v, want the timing goals not measured and the heap goal measured", g)
	}
}

// The section's table has a row per list through the set and the single
// lists' extremes, and its text gives the verdict on the heap bound.
func TestFanoutSection(t *testing.T) {
	f := fixtureFanout(60e6, 230*time.Millisecond, 105*time.Millisecond)
	f.Lists[1].Warnings = 2
	got, err := render("fanout", f)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## 8. One list across a set of clusters",
		"| list | page | first row | complete | answer | items | peak heap in use above the base (sampled) | per cluster | ÷ answer | ÷ (clusters × page) |\n|---|---:|",
		"| the set (100 clusters) | 500 | 105.00 ms | 230.00 ms | 238.4 MiB | 200000 | 57.2 MiB | 585.9 KiB | 0.24 | 1.00 |",
		"| the set (100 clusters), 2 warnings | 100 | 52.50 ms |",
		"| one cluster, the fastest | none |  | 100.00 ms | 2.3 MiB | 2000 |",
		"| one cluster, the slowest | none |  | 199.00 ms |",
		"| a client's loop, one cluster after another (100) | none |  | 14.95 s |",
		"| a client's loop, 16 clusters at a time | none |  | 9.00 s |",
		"**bounded by clusters × page size**",
		"1.16× the slowest single cluster's list (230.00 ms vs 199.00 ms)",
		"1.05× the fastest single cluster's list (105.00 ms vs 100.00 ms)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the section lacks %q:\n%s", want, got)
		}
	}
	f.Lists[0].PeakHeap = f.Lists[0].Base + f.Lists[0].Bytes
	if got, _ := render("fanout", f); !strings.Contains(got, "**not bounded by clusters × page size**") {
		t.Errorf("a growth as large as the answer: the section does not say it is unbounded:\n%s", got)
	}
}

// The first row is the first cluster annotation, even split across writes.
func TestAnnotationCounter(t *testing.T) {
	firsts := 0
	c := &annotationCounter{key: []byte(fanoutAnnotation), first: func() { firsts++ }}
	body := `{"items":[{"metadata":{"annotations":{"` + fanoutAnnotation + `":"a"}}},{"metadata":{"annotations":{"` + fanoutAnnotation + `":"b"}}}]}`
	for i := 0; i < len(body); i += 7 {
		c.Write([]byte(body[i:min(i+7, len(body))]))
	}
	if c.n != 2 || firsts != 1 {
		t.Fatalf("counted %d annotations and %d first rows, want 2 and 1", c.n, firsts)
	}
}
