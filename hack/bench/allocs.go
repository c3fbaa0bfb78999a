package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// allocIters is how many requests each allocation profile covers.
const allocIters = 2000

// Where the in-process benchmarks' allocations are attributed.
const (
	fnHandlers = "net/http.(*http2serverConn).runHandler" // every handler goroutine of the front end's HTTP/2 server
	fnServe    = "github.com/clustergateway/cluster-gateway/pkg/proxy.(*Proxy).Serve"
	fnReverse  = "net/http/httputil.(*ReverseProxy).ServeHTTP"
)

// allocProfile is every allocation of one in-process benchmark (the memory
// profile rate at 1), per request: by function, and what Serve's callees
// allocate outside the ReverseProxy that the bare proxy runs too.
type allocProfile struct {
	Command string
	Total   float64            // allocs/op of the measured run, as testing counts them (setup left out)
	Cum     map[string]float64 // per function, with its callees
	Serve   []allocSite        // Serve's own, by callee (and "itself")
}

type allocSite struct {
	Name   string
	Allocs float64
}

// profileAllocs runs one in-process benchmark (e.g.
// "BenchmarkProxyGateway/list") for allocIters requests with every
// allocation recorded, and reads the profile; with serve, also what Serve's
// callees allocate. The profile has the benchmark's setup too, so only
// functions that run per request are read from it.
func profileAllocs(ctx context.Context, goBin, bench string, serve bool) (*allocProfile, error) {
	dir, err := os.MkdirTemp("", "bench-allocs-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	top, sub, _ := strings.Cut(bench, "/")
	bin, prof := filepath.Join(dir, "proxy.test"), filepath.Join(dir, "mem.pprof")
	args := []string{"test", "-run", "^$", "-bench", "^" + top + "$/^" + sub + "$", "-benchtime", strconv.Itoa(allocIters) + "x", "-benchmem",
		"-memprofilerate", "1", "-memprofile", prof, "-o", bin, "./pkg/proxy/"}
	ap := &allocProfile{Command: goBin + " " + strings.Join(quoteArgs(args), " "), Cum: map[string]float64{}}
	out, err := exec.CommandContext(ctx, goBin, args...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s", ap.Command, err, out)
	}
	gb := goBench{Samples: map[string][]benchSample{}}
	gb.parse(strings.NewReader(string(out)))
	if ap.Total = gb.median(bench, allocsOp); ap.Total == 0 {
		return nil, fmt.Errorf("%s: no allocs/op for %s in its output", ap.Command, bench)
	}
	// The benchmark runs once with b.N = 1 before the measured run.
	per := func(v float64) float64 { return v / (allocIters + 1) }
	all, err := pprofText(ctx, goBin, bin, prof, "-top", "-nodecount=100000")
	if err != nil {
		return nil, err
	}
	for _, l := range topLines(all) {
		ap.Cum[l.name] = per(l.cum)
	}
	if !serve {
		return ap, nil
	}
	peek, err := pprofText(ctx, goBin, bin, prof, "-ignore", regexp.QuoteMeta(fnReverse), "-peek", regexp.QuoteMeta(fnServe)+"$")
	if err != nil {
		return nil, err
	}
	ap.Serve = peekCallees(peek, fnServe, per)
	return ap, nil
}

// pprofText is `go tool pprof` of alloc_objects with every node kept,
// with args (the output mode and its filters).
func pprofText(ctx context.Context, goBin, bin, prof string, args ...string) (string, error) {
	args = append([]string{"tool", "pprof", "-sample_index=alloc_objects", "-nodefraction=0", "-edgefraction=0"}, args...)
	out, err := exec.CommandContext(ctx, goBin, append(args, bin, prof)...).Output()
	return string(out), err
}

type topLine struct {
	flat, cum float64
	name      string
}

// topRow matches a row of `pprof -top` in counts, "  20003  1.2%  3.4%
// 40006  2.5%  name", also of a -diff_base profile (negative counts).
var topRow = regexp.MustCompile(`^\s*(-?\d+)\s+-?[\d.]+%\s+-?[\d.]+%\s+(-?\d+)\s+-?[\d.]+%\s+(.+?)(?: \((?:partial-)?inline\))?$`)

// topLines reads the rows of `pprof -top` in counts (alloc_objects), names
// without pprof's "(inline)".
func topLines(text string) []topLine {
	var out []topLine
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		if m := topRow.FindStringSubmatch(sc.Text()); m != nil {
			f, _ := strconv.ParseFloat(m[1], 64)
			c, _ := strconv.ParseFloat(m[2], 64)
			out = append(out, topLine{flat: f, cum: c, name: m[3]})
		}
	}
	return out
}

// peekRow matches a callee row below a -peek node: "  40006 50.00% |   name".
var peekRow = regexp.MustCompile(`^\s*(\d+)\s+[\d.]+%\s+\|\s+(.+?)(?: \((?:partial-)?inline\))?$`)

// peekNode matches the node's own row: "  20003  0.41%  ...  60009  1.24%  | name".
var peekNode = regexp.MustCompile(`^\s*(\d+)\s+[\d.]+%\s+[\d.]+%\s+(\d+)\s+[\d.]+%\s+\|\s+(.+?)(?: \((?:partial-)?inline\))?$`)

// peekCallees reads fn's callees and its own allocations from -peek output.
func peekCallees(text, fn string, per func(float64) float64) []allocSite {
	var out []allocSite
	in := false
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "---") {
			if in {
				break
			}
			continue
		}
		if m := peekNode.FindStringSubmatch(line); m != nil {
			if m[3] == fn {
				in = true
				if f, _ := strconv.ParseFloat(m[1], 64); f > 0 {
					out = append(out, allocSite{Name: "itself", Allocs: per(f)})
				}
			}
			continue
		}
		if m := peekRow.FindStringSubmatch(line); m != nil && in {
			v, _ := strconv.ParseFloat(m[1], 64)
			out = append(out, allocSite{Name: m[2], Allocs: per(v)})
		}
	}
	slices.SortFunc(out, func(a, b allocSite) int {
		switch {
		case a.Allocs > b.Allocs:
			return -1
		case a.Allocs < b.Allocs:
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// allocBudget is the in-process goal's bound on the handler's allocations per request
// beyond the bare proxy's.
const allocBudget = 20

// profileAllocsOver profiles the allocations of both benchmarks of each
// body over budget, so that the report can say where they are. A failure
// is logged and leaves the report without them.
func (gb *goBench) profileAllocsOver(ctx context.Context, goBin string, budget float64) {
	for _, body := range []string{"get", "list"} {
		g, b := "BenchmarkProxyGateway/"+body, "BenchmarkBareReverseProxy/"+body
		if gb.median(g, allocsOp)-gb.median(b, allocsOp) <= budget {
			continue
		}
		for _, name := range []string{g, b} {
			logf("profiling the allocations of %s", name)
			ap, err := profileAllocs(ctx, goBin, name, name == g)
			if err != nil {
				logf("allocation profile of %s: %v", name, err)
				return
			}
			if gb.Allocs == nil {
				gb.Allocs = map[string]*allocProfile{}
			}
			gb.Allocs[name] = ap
		}
	}
}

// allocLimits says, for each body whose allocations per request are over
// the goal, where the difference from the bare proxy is, from the
// allocation profiles: the front end's stand-in for the generic server,
// the handler's own work by what Serve calls, the ReverseProxy both run,
// and the rest of the process.
func (r *report) allocLimits(b *strings.Builder) {
	gb := r.GoBench
	if gb == nil {
		return
	}
	wrote := false
	for _, body := range []string{"get", "list"} {
		gn, bn := "BenchmarkProxyGateway/"+body, "BenchmarkBareReverseProxy/"+body
		g, bare := gb.Allocs[gn], gb.Allocs[bn]
		if g == nil || bare == nil {
			continue
		}
		if !wrote {
			fmt.Fprintf(b, "What limits the allocation goals not met, from a profile of every allocation (memory profile rate 1) of each benchmark over %d requests (`%s`, and the same for the bare proxy), per request:\n\n", allocIters, g.Command)
			wrote = true
		}
		// The server's handler goroutines run the front end, Serve and its
		// ReverseProxy; the bare proxy's run the ReverseProxy alone.
		front := (g.Cum[fnHandlers] - g.Cum[fnServe]) - (bare.Cum[fnHandlers] - bare.Cum[fnReverse])
		own := g.Cum[fnServe] - g.Cum[fnReverse]
		rp := g.Cum[fnReverse] - bare.Cum[fnReverse]
		timers := g.Cum["time.NewTimer"] - bare.Cum["time.NewTimer"]
		rest := (g.Total - bare.Total) - front - own - rp
		var sites []string
		inner := 0.0
		for _, s := range g.Serve {
			if s.Allocs < 0.05 {
				continue
			}
			if strings.HasSuffix(s.Name, ".parseInnerOnce") {
				inner = s.Allocs
			}
			sites = append(sites, fmt.Sprintf("%s %.1f", strings.TrimPrefix(s.Name, "github.com/clustergateway/cluster-gateway/pkg/"), s.Allocs))
		}
		fmt.Fprintf(b, "- In process (`%s`): %+.0f allocs/op against the bare proxy's median (the goal allows %+d); in the profiled runs %+.0f (%.0f vs %.0f). "+
			"The front end's stand-in for the generic server (the hub path's RequestInfo, the user and their context), which the bare proxy's row does without: %.1f. "+
			"The handler's own work beside the ReverseProxy both run: %.1f, by what `Serve` calls: %s. "+
			"The ReverseProxy: %+.1f (%.1f vs %.1f). The rest of the process (client, server, and x/net's goroutine per request): %+.1f, of which timers %+.1f "+
			"(x/net arms one per request for the pooled transport's response-header timeout, `--upstream-response-header-timeout`, which the bare proxy does not set).",
			body, gb.median(gn, allocsOp)-gb.median(bn, allocsOp), allocBudget, g.Total-bare.Total, g.Total, bare.Total,
			front, own, strings.Join(sites, ", "), rp, g.Cum[fnReverse], bare.Cum[fnReverse], rest, timers)
		if inner > 0 {
			fmt.Fprintf(b, " The inner request's RequestInfo (`parseInnerOnce`: k8s.io/apiserver's RequestInfoFactory, the parse the managed cluster's API server makes of the same request) is %.1f of the handler's own: "+
				"for a list it parses the query three times and decodes ListOptions. A parse of the gateway's own could skip that, but would have to agree with the cluster's "+
				"on the verb, the name and the selectors, on which the inner authorization and the long-running decision depend.", inner)
		}
		b.WriteString("\n")
	}
	if wrote {
		b.WriteString("\n")
	}
}
