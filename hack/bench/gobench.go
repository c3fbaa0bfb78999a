package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// goBench is the outcome of one `go test -bench` invocation: every sample
// of every benchmark, so ratios come from numbers taken side by side.
type goBench struct {
	Command string
	Samples map[string][]benchSample // by name without the -GOMAXPROCS suffix
	Order   []string
}

type benchSample struct{ NsOp, BOp, AllocsOp float64 }

// benchLine matches e.g. "BenchmarkDirect/get-2  26006  61747 ns/op  8334 B/op  78 allocs/op".
var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(-\d+)?\s+\d+\s+([\d.]+) ns/op(?:\s+([\d.]+) B/op)?(?:\s+([\d.]+) allocs/op)?`)

// goBenchPkgs are the packages of the in-process benchmarks, and
// goBenchPattern the benchmarks run.
var goBenchPkgs = []string{"./pkg/proxy/", "./pkg/pool/"}

const goBenchPattern = "^Benchmark(Direct|BareReverseProxy|ProxyGateway|ServePieces|AcquireRelease)$"

// runGoBench runs the in-process benchmarks: each package's test binary,
// built once, runs every benchmark once per round for count rounds. In
// turn, not go test's -count (back to back), so that a machine that slows
// down does not favour whichever ran first (0.78 and 1.15 for one commit).
func runGoBench(ctx context.Context, goBin string, count int, benchtime string) (*goBench, error) {
	dir, err := os.MkdirTemp("", "bench-go-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bins := make([]string, len(goBenchPkgs))
	for i, pkg := range goBenchPkgs {
		bins[i] = filepath.Join(dir, filepath.Base(pkg)+".test")
		if out, err := exec.CommandContext(ctx, goBin, "test", "-c", "-o", bins[i], pkg).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%s test -c %s: %w: %s", goBin, pkg, err, out)
		}
	}
	flags := []string{"-test.run", "^$", "-test.bench", goBenchPattern, "-test.benchmem", "-test.count", "1", "-test.benchtime", benchtime}
	gb := &goBench{
		Command: fmt.Sprintf("%s test -c %s; then, %d rounds in turn, each test binary in its package's folder: <pkg>.test %s",
			goBin, strings.Join(goBenchPkgs, " "), count, strings.Join(quoteArgs(flags), " ")),
		Samples: map[string][]benchSample{},
	}
	logf("running %s", gb.Command)
	for round := 0; round < count; round++ {
		for i, bin := range bins {
			cmd := exec.CommandContext(ctx, bin, flags...)
			cmd.Dir = goBenchPkgs[i] // where go test runs it
			cmd.Stderr = os.Stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				return nil, err
			}
			if err := cmd.Start(); err != nil {
				return nil, err
			}
			gb.parse(io.TeeReader(out, os.Stdout))
			if err := cmd.Wait(); err != nil {
				return nil, fmt.Errorf("%s (round %d): %w", bin, round+1, err)
			}
		}
	}
	return gb, nil
}

func (gb *goBench) parse(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		var s benchSample
		s.NsOp, _ = strconv.ParseFloat(m[3], 64)
		s.BOp, _ = strconv.ParseFloat(m[4], 64)
		s.AllocsOp, _ = strconv.ParseFloat(m[5], 64)
		if _, seen := gb.Samples[m[1]]; !seen {
			gb.Order = append(gb.Order, m[1])
		}
		gb.Samples[m[1]] = append(gb.Samples[m[1]], s)
	}
}

// median of one field over a benchmark's samples (0 when absent).
func (gb *goBench) median(name string, field func(benchSample) float64) float64 {
	var v []float64
	for _, s := range gb.Samples[name] {
		v = append(v, field(s))
	}
	return medianOf(v)
}

// Range is the fastest and slowest sample's ns/op.
func (gb *goBench) Range(name string) string {
	var lo, hi float64
	for i, s := range gb.Samples[name] {
		if i == 0 || s.NsOp < lo {
			lo = s.NsOp
		}
		hi = max(hi, s.NsOp)
	}
	return fmtNs(lo) + " – " + fmtNs(hi)
}

func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func nsOp(s benchSample) float64     { return s.NsOp }
func bOp(s benchSample) float64      { return s.BOp }
func allocsOp(s benchSample) float64 { return s.AllocsOp }

// Median is the benchmark's medians of each figure.
func (gb *goBench) Median(name string) benchSample {
	return benchSample{NsOp: gb.median(name, nsOp), BOp: gb.median(name, bOp), AllocsOp: gb.median(name, allocsOp)}
}

func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, "^$|()* ") {
			a = "'" + a + "'"
		}
		out[i] = a
	}
	return out
}
