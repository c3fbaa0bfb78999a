package main

import (
	_ "embed"
	"fmt"
	"os"
	"strings"
	"text/template"
	"time"
)

// report is everything one run measured; report.md.tmpl writes it as
// docs/performance.md, every table through table.
type report struct {
	Machine    machine
	Opts       options
	GoBench    *goBench
	Targets    []*target
	Pooled     *pooledResult
	Isolation  *isolationResult
	AB         *abResultSet
	Scan       *scanResult
	Streams    *streamsResult
	Watches    *watchesResult
	Fanout     *fanoutResult
	EnvStartup time.Duration
	Capacity   int
	Total      time.Duration

	Profiles    []pathProfile // the gateway's CPU during loads (profile.go)
	GatewayArgs []string      // the gateway's flags, for the authorization cache TTLs
	AuthzIdle   *authzSteady  // SubjectAccessReviews without load (sar.go)
}

//go:embed report.md.tmpl
var reportText string

var reportTemplate = template.Must(template.New("performance.md").Funcs(template.FuncMap{
	"mib": mib, "kib": kib, "dur": fmtDur, "ns": fmtNs, "ratio": ratio, "join": strings.Join,
	"f0": f0, "f1": f1, "f2": f2, "x": x, "div": div,
	"round":         func(d time.Duration, unit string) time.Duration { u, _ := time.ParseDuration(unit); return d.Round(u) },
	"args":          func() string { return strings.Join(os.Args[1:], " ") },
	"cpu":           cpuStr,
	"allocPath":     allocPath,
	"requestPath":   func() string { return requestPath },
	"benchUser":     func() string { return benchUser },
	"settleSamples": func() int { return settleSamples },
	"sub":           func(a, b float64) float64 { return a - b },
	"inc":           func(i int) int { return i + 1 },
	"addInt":        func(a, b int) int { return a + b },
	"trimPrefix":    strings.TrimPrefix,
	"perThousand":   perThousand,
	"table":         newTable,
	"list":          func(v ...any) []any { return v },
	"numList":       numList, "durList": durList, "cpuShare": cpuShare,
	"fanoutClients":     func() int { return fanoutClients },
	"fanoutOtherPage":   func() int { return fanoutOtherPage },
	"fanoutProfileFor":  func() time.Duration { return fanoutProfileFor },
	"fanoutSampleEvery": func() time.Duration { return fanoutSampleEvery },
	"fanoutWatches":     func() int { return fanoutWatches },
	"fanoutWatchSet":    func() int { return fanoutWatchSet },
	"watchUsers":        func() int { return *watchUsers },
	"mul":               func(a, b int) int { return a * b },
	"float":             func(d time.Duration) float64 { return float64(d) },
}).Parse(reportText))

// markdown is the report as docs/performance.md.
func (r *report) markdown() (string, error) { return render("report", r) }

// render is one of the report's templates executed with data: one section
// or piece of it.
func render(name string, data any) (string, error) {
	var b strings.Builder
	err := reportTemplate.ExecuteTemplate(&b, name, data)
	return b.String(), err
}

// T is the load of key that ran, or nil.
func (r *report) T(key string) *target {
	for _, t := range r.Targets {
		if t.Key == key && t.TODO == "" && t.Res.Requests > 0 {
			return t
		}
	}
	return nil
}

// table is a Markdown table: the header row, then the rows, each a cell per
// column; align has a letter per column, 'r' right-aligned, else left.
type table struct {
	align string
	rows  [][]string
}

func newTable(align string, head ...string) *table {
	if len(align) != len(head) {
		panic(fmt.Sprintf("table %q: %d alignments for %d columns", head, len(align), len(head)))
	}
	return &table{align: align, rows: [][]string{head}}
}

// add appends a row; a row of fewer cells is padded with empty ones.
func (t *table) add(cells ...string) *table {
	if len(cells) > len(t.align) {
		panic(fmt.Sprintf("table %q: a row of %d cells", t.rows[0], len(cells)))
	}
	for len(cells) < len(t.align) {
		cells = append(cells, "")
	}
	t.rows = append(t.rows, cells)
	return t
}

// Row is add for the template (which prints what a call returns): a cell
// that is a list is spread over as many, others are printed.
func (t *table) Row(cells ...any) string {
	var row []string
	for _, c := range cells {
		if l, ok := c.([]any); ok {
			for _, v := range l {
				row = append(row, fmt.Sprint(v))
			}
		} else {
			row = append(row, fmt.Sprint(c))
		}
	}
	t.add(row...)
	return ""
}

func (t *table) String() string {
	var b strings.Builder
	for i, row := range t.rows {
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
		if i == 0 {
			b.WriteString("|")
			for _, a := range t.align {
				if a == 'r' {
					b.WriteString("---:|")
				} else {
					b.WriteString("---|")
				}
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

// cpuStr is the CPU per request of roles together in res, or a dash
// when one was not measured.
func cpuStr(res *loadResult, roles ...string) string { return cpuSum(res.cpuPerReq, roles) }

// cpuSum is the sum of per over roles as a cell, a dash when one of them was
// not measured.
func cpuSum(per func(role string) (time.Duration, bool), roles []string) string {
	var sum time.Duration
	for _, role := range roles {
		c, ok := per(role)
		if !ok {
			return "–"
		}
		sum += c
	}
	return fmtDur(sum)
}

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	}
}

func fmtNs(ns float64) string {
	switch {
	case ns >= 1e6:
		return fmt.Sprintf("%.2f ms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.1f µs", ns/1e3)
	default:
		return fmt.Sprintf("%.0f ns", ns)
	}
}

func f0(v float64) string  { return fmt.Sprintf("%.0f", v) }
func f1(v float64) string  { return fmt.Sprintf("%.1f", v) }
func f2(v float64) string  { return fmt.Sprintf("%.2f", v) }
func x(v float64) string   { return fmt.Sprintf("%.2f×", v) } // a ratio
func mib(v float64) string { return fmt.Sprintf("%.1f MiB", v/(1<<20)) }
func kib(v float64) string { return fmt.Sprintf("%.1f KiB", v/(1<<10)) }

// durList is ds as one cell: each formatted, slash-separated.
func durList(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, fmtDur(d))
	}
	return strings.Join(s, " / ")
}

// numList is vs as one cell, each without decimals, slash-separated.
func numList(vs []float64) string {
	var s []string
	for _, v := range vs {
		s = append(s, fmt.Sprintf("%.0f", v))
	}
	return strings.Join(s, " / ")
}
