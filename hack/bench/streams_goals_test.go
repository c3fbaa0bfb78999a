package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// streamRun is a path's results: MB (or lines) moved in one second per
// kind, and the CPU of the roles over all of them.
func streamRun(key string, mb float64, cpu map[string]time.Duration) *streamPath {
	p := &streamPath{Key: key, res: map[string]*streamResult{}}
	for _, k := range streamKinds {
		c := map[string]time.Duration{}
		for role, d := range cpu {
			c[role] = d / time.Duration(len(streamKinds))
		}
		p.res[k.Key] = &streamResult{Units: mb, Elapsed: time.Second, CPU: c}
	}
	return p
}

// The stream goals compare the gateway with direct over Direct and with the
// bare proxy over the same tunnel, and its CPU per MB with the bare proxy's
// over port-forward and exec together; a path that failed is not judged.
func TestStreamGoalsFromOneRun(t *testing.T) {
	ms := time.Millisecond
	r := &report{Streams: &streamsResult{Paths: []*streamPath{
		streamRun("direct", 100, nil),
		streamRun("bare", 80, map[string]time.Duration{"bare-proxy": 400 * ms}),
		streamRun("gateway", 90, map[string]time.Duration{"gateway": 540 * ms}), // 1.5 ms per MB vs the bare proxy's 1.25
		streamRun("bare-konn", 30, map[string]time.Duration{"bare-proxy": 400 * ms}),
		streamRun("konn", 26, nil),
	}}}
	r.Streams.path("konn").res["exec"].Err = errors.New("upgrade refused")
	gs := r.Goals()
	for _, c := range []struct {
		prefix  string
		value   float64
		met     bool
		missing bool
	}{
		{"Streams, Direct: gateway port-forward, 1 connection", 0.9, true, false},
		{"Streams, Direct: gateway exec", 0.9, true, false},
		{"Streams, Konnectivity: gateway port-forward, 8 connections", 26.0 / 30, false, false},
		{"Streams, Konnectivity: gateway exec", 0, false, true},
		{"Streams, Direct: gateway CPU per MB", 1.2, true, false},
	} {
		g := goalNamed(t, gs, c.prefix)
		if (g.Missing != "") != c.missing || (!c.missing && (!near(g.Value, c.value) || g.met() != c.met)) {
			t.Errorf("%s: value %v met %v (missing %q), want %v met %v missing %v", c.prefix, g.Value, g.met(), g.Missing, c.value, c.met, c.missing)
		}
	}
}

// The watches goal compares what a watch holds (Go heap + stacks), not
// RSS, and says RSS beside it.
func TestWatchGoalComparesHeapAndStacks(t *testing.T) {
	r := &report{Watches: &watchesResult{Holders: []*watchResult{
		{Key: "gateway", Watches: 100, After: memSample{RSS: 5000e3, Heap: 3000e3, Stacks: 2000e3}},
		{Key: "bare", Watches: 100, After: memSample{RSS: 4000e3, Heap: 4500e3, Stacks: 2000e3}},
	}}}
	g := goalNamed(t, r.Goals(), "Idle watches")
	if g.Missing != "" || !near(g.Value, 5000.0/6500) || !g.met() {
		t.Fatalf("value %v met %v (missing %q), want %v met", g.Value, g.met(), g.Missing, 5000.0/6500)
	}
}

// A missed bandwidth goal says in how many interleaved rounds the gateway
// fell short of its baseline; a met one has no line.
func TestStreamLimitsCountRoundsBelow(t *testing.T) {
	r := &report{Streams: &streamsResult{Paths: []*streamPath{
		streamRun("bare-konn", 30, nil),
		streamRun("konn", 24, nil),
		streamRun("direct", 100, nil),
		streamRun("gateway", 95, nil),
	}}}
	r.Streams.path("bare-konn").res["exec"].Rounds = []float64{30, 30, 30}
	r.Streams.path("konn").res["exec"].Rounds = []float64{20, 29, 23}
	out := mustRender(t, "streamLimits", r)
	if want := "exec, stdin → `cat` → stdout, Konnectivity: the gateway reaches 0.80× the bare proxy over the same tunnel; below 0.90× in 2 of 3 rounds (0.67× / 0.97× / 0.77×)."; !strings.Contains(out, want) {
		t.Errorf("want %q in:\n%s", want, out)
	}
	if strings.Contains(out, "Direct:") {
		t.Errorf("a met goal has a line:\n%s", out)
	}
}

// flatShare adds the own-CPU percentages of the listed functions whose
// names match, from pprof -top's lines, and skips its header.
func TestFlatShareOfProfileTop(t *testing.T) {
	top := `Duration: 2.02s, Total samples = 740ms (36.62%)
Showing nodes accounting for 700ms, 94.59% of 740ms total
      flat  flat%   sum%        cum   cum%
     390ms 52.70% 52.70%      390ms 52.70%  internal/runtime/syscall/linux.Syscall6
      80ms 10.81% 63.51%       80ms 10.81%  crypto/internal/fips140/aes/gcm.gcmAesDec
      30ms  4.05% 78.38%      410ms 55.41%  syscall.RawSyscall6
      10ms  1.35% 85.14%      450ms 60.81%  crypto/tls.(*Conn).writeRecordLocked
      10ms  1.35% 90.54%      290ms 39.19%  net.(*netFD).Write`
	if got := flatShare(top, "syscall", "Syscall"); !near(got, 56.75) {
		t.Errorf("system calls: %v, want 56.75", got)
	}
	if got := flatShare(top, "crypto/"); !near(got, 12.16) {
		t.Errorf("TLS: %v, want 12.16", got)
	}
}
