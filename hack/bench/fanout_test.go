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
	// ≤ 1.1 × 100 ms, and the growth with limit=100 is a fifth of the one
	// with 500 (a fifth of the page): it follows the page.
	r := &report{Fanout: fixtureFanout(60e6, 230*time.Millisecond, 105*time.Millisecond)}
	g := goalsByName(r.fanoutGoals())
	if len(g) != 3 {
		t.Fatalf("fan-out goals: %+v, want complete, first row and heap", g)
	}
	for name, want := range map[string]float64{"complete": 230.0 / 199, "first": 1.05, "heap": 0.2} {
		if got := g[name]; got.Missing != "" || !got.met() || got.Value < want-0.01 || got.Value > want+0.01 {
			t.Errorf("%s: %+v, want %.2f and met", name, got, want)
		}
	}
	if g["heap"].Limit != 0.6 || !r.Fanout.Bounded() {
		t.Errorf("heap: bound %.2f, Bounded %v; want 0.6 (halfway from 1 to a fifth) and bounded", g["heap"].Limit, r.Fanout.Bounded())
	}
	// Over every bound: complete 10 s, first row 5 s; a growth that stays
	// as large with a fifth of the page follows the objects.
	r.Fanout = fixtureFanout(250e6, 10*time.Second, 5*time.Second)
	r.Fanout.Lists[1].PeakHeap = r.Fanout.Lists[0].PeakHeap
	g = goalsByName(r.fanoutGoals())
	for _, name := range []string{"complete", "first", "heap"} {
		if got := g[name]; got.Missing != "" || got.met() {
			t.Errorf("%s: %+v, want measured and not met", name, got)
		}
	}
	if r.Fanout.Bounded() {
		t.Error("Bounded: a growth that did not change with the page counts as bounded by pages")
	}
	// A larger second page (as the bench runs it: 500 then 1000): twice the
	// page, 1.9× the growth follows it; 1.2× does not.
	r.Fanout.Lists[1].Page, r.Fanout.Lists[1].PeakHeap = 1000, r.Fanout.Lists[1].Base+1.9*r.Fanout.Lists[0].Growth()
	if got, bound, ok := r.Fanout.Follows(); !ok || bound != 1.5 || !r.Fanout.Bounded() {
		t.Errorf("twice the page, 1.9× the growth: %.2f against %.2f (%v), Bounded %v; want 1.9 ≥ 1.5 and bounded", got, bound, ok, r.Fanout.Bounded())
	}
	r.Fanout.Lists[1].PeakHeap = r.Fanout.Lists[1].Base + 1.2*r.Fanout.Lists[0].Growth()
	if r.Fanout.Bounded() {
		t.Error("twice the page, 1.2× the growth: counted as following the page")
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
	r.Fanout.Lists = r.Fanout.Lists[:1]
	if g := goalsByName(r.fanoutGoals()); g["complete"].Missing == "" || g["first"].Missing == "" || g["heap"].Missing == "" {
		t.Errorf("without single lists and with one list through the set: %+v, want no goal measured", g)
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
		"**the peak follows clusters × page size**",
		"1.16× the slowest single cluster's list (230.00 ms vs 199.00 ms)",
		"1.05× the fastest single cluster's list (105.00 ms vs 100.00 ms)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the section lacks %q:\n%s", want, got)
		}
	}
	f.Lists[1].PeakHeap = f.Lists[0].PeakHeap
	if got, _ := render("fanout", f); !strings.Contains(got, "**the peak does not follow the page size**") {
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
