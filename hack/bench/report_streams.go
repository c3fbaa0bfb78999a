package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// streamGoalRatio and streamCPUGoal are the streams section's bounds:
// bandwidth ≥ 0.90× the baseline, gateway CPU per MB ≤ 1.2× the bare proxy's.
const (
	streamGoalRatio = 0.90
	streamCPUGoal   = 1.2
)

// byteKinds are the kinds of stream measured in MB.
var byteKinds = []string{"pf1", "pf8", "exec"}

func kindOf(key string) streamKind {
	for _, k := range streamKinds {
		if k.Key == key {
			return k
		}
	}
	return streamKind{Key: key, Name: key}
}

// streamComparison is a bandwidth goal's pair of paths: the gateway's and
// its baseline's.
type streamComparison struct{ gw, base, baseName, where string }

// streamComparisons are the bandwidth goals' pairs, over Direct and over
// Konnectivity.
var streamComparisons = []streamComparison{
	{"gateway", "direct", "direct", "Direct"},
	{"konn", "bare-konn", "the bare proxy over the same tunnel", "Konnectivity"},
}

// streamGoals are the streams section's goals: the gateway's bandwidth
// against direct (Direct) and against the bare proxy over the same tunnel
// (Konnectivity), and its CPU per MB against the bare proxy's.
func (r *report) streamGoals() []goal {
	s := r.Streams
	var out []goal
	for _, c := range streamComparisons {
		for _, kind := range byteKinds {
			k := kindOf(kind)
			g := goal{Goal: fmt.Sprintf("Streams, %s: gateway %s bandwidth ≥ %.2f× %s", c.where, k.Name, streamGoalRatio, c.baseName), Limit: streamGoalRatio, AtLeast: true}
			gw, base := s.result(c.gw, kind), s.result(c.base, kind)
			if gw == nil || base == nil {
				g.Missing = "streams not run, or a path failed (section 6)"
				out = append(out, g)
				continue
			}
			g.Value = gw.rate() / base.rate()
			g.Measured = fmt.Sprintf("%.2f× (%.1f vs %.1f MB/s)", g.Value, gw.rate(), base.rate())
			if c.base == "direct" {
				if bare := s.result("bare", kind); bare != nil {
					g.Measured += fmt.Sprintf("; the bare proxy: %.2f× direct", bare.rate()/base.rate())
				}
			}
			out = append(out, g)
		}
	}
	g := goal{Goal: fmt.Sprintf("Streams, Direct: gateway CPU per MB (port-forward and exec) ≤ %.1f× the bare proxy's", streamCPUGoal), Limit: streamCPUGoal}
	gc, gok := s.cpuPerMB("gateway", "gateway")
	bc, bok := s.cpuPerMB("bare", "bare-proxy")
	if gok && bok && bc > 0 {
		g.Value = ratio(gc, bc)
		g.Measured = fmt.Sprintf("%.2f× (%s vs %s per MB)", g.Value, fmtDur(gc), fmtDur(bc))
		if kc, ok1 := s.cpuPerMB("konn", "gateway"); ok1 {
			if bkc, ok2 := s.cpuPerMB("bare-konn", "bare-proxy"); ok2 && bkc > 0 {
				g.Measured += fmt.Sprintf("; over Konnectivity %.2f× (%s vs %s)", ratio(kc, bkc), fmtDur(kc), fmtDur(bkc))
			}
		}
	} else {
		g.Missing = "streams not run, or a path failed (section 6)"
	}
	return append(out, g)
}

// cpuPerMB is role's CPU per MB over path's port-forward and exec
// measurements together; false unless all of them were measured.
func (s *streamsResult) cpuPerMB(path, role string) (time.Duration, bool) {
	var cpu time.Duration
	var mb float64
	for _, kind := range byteKinds {
		res := s.result(path, kind)
		if res == nil {
			return 0, false
		}
		c, ok := res.CPU[role]
		if !ok {
			return 0, false
		}
		cpu += c
		mb += res.Units
	}
	return time.Duration(float64(cpu) / mb), mb > 0
}

// streamsSection is section 6: the streams side by side.
func (r *report) streamsSection(b *strings.Builder) {
	s := r.Streams
	fmt.Fprintf(b, "## 6. Streams: port-forward, exec and `logs -f`\n\n")
	fmt.Fprintf(b, "Each path reaches the pod `bulk` on a fake kubelet (hack/localenv) through a real kube-apiserver, with client-go's own stream clients as kubectl uses them: "+
		"`tools/portforward` listening on 127.0.0.1 (one upgraded connection per path, kept for the section; a stream pair per local connection) and `tools/remotecommand`, "+
		"both over %s%s. The kubelet connects port-forward to an echo server: the bench writes for %s on each connection while it reads the echo, then reads until every byte came back; "+
		"MB/s is the MB written (each also came back) over that time. Exec runs `cat` in a new session per measurement, stdin for %s, and MB/s is what came back on stdout from the first stdin read "+
		"to the session's end. `logs -f` follows a container that writes numbered lines, each flushed, as fast as they are read (an HTTP/2 GET, as client-go's). "+
		"Every path and kind of stream runs %s per round in %d interleaved rounds (each round: each kind over each path in turn), after a short warm-up. "+
		"The gateway paths authenticate as the hub admin (authorization only happens when a stream starts).\n\n",
		s.protocolName(), s.fallbackNote(), s.Time, s.Time, s.Time, s.Rounds)
	b.WriteString("| path | port-forward, 1 conn (MB/s) | port-forward, 8 conns (MB/s) | exec `cat` (MB/s) | `logs -f` (lines/s) |\n|---|---:|---:|---:|---:|\n")
	for _, p := range s.Paths {
		cells := []string{p.Name}
		for _, k := range streamKinds {
			cells = append(cells, streamCell(p.res[k.Key]))
		}
		fmt.Fprintf(b, "| %s |\n", strings.Join(cells, " | "))
	}
	b.WriteString("\nEach cell: the rate over all rounds, then each round's in brackets.\n\n")
	r.streamRatios(b)
	r.streamCPU(b)
	for _, p := range s.Paths {
		fmt.Fprintf(b, "- %s: %s\n", p.Name, p.Via)
	}
	b.WriteString("\n")
	for _, p := range s.Paths {
		for _, k := range streamKinds {
			if res := p.res[k.Key]; res != nil && res.Err != nil {
				fmt.Fprintf(b, "- **%s over %s failed**: `%v`\n", k.Name, p.Name, res.Err)
			}
		}
	}
	if len(s.Profiles) > 0 {
		b.WriteString("\n### The gateway's CPU during streams\n\nThe gateway is CPU-profiled during the first round of each kind of stream over its port (Direct). The top functions by their own CPU:\n\n")
		for _, p := range s.Profiles {
			fmt.Fprintf(b, "Gateway %s: `go tool pprof %s`.\n\n", p.What, p.Path)
			p.topBlock(b)
		}
	}
	r.streamLimits(b)
}

func (s *streamsResult) protocolName() string {
	if s.Protocol == "spdy" {
		return "SPDY/3.1 (`-stream-protocol spdy`)"
	}
	return "WebSocket (kubectl's default; port-forward as SPDY tunnelled in WebSocket, exec as `v5.channel.k8s.io`)"
}

func (s *streamsResult) fallbackNote() string {
	if s.Protocol == "spdy" {
		return ""
	}
	return ", without kubectl's fallback to SPDY, so that a path that cannot upgrade to WebSocket fails instead of being measured as SPDY; the managed kube-apiserver translates to SPDY towards the kubelet"
}

func streamCell(res *streamResult) string {
	switch {
	case res == nil:
		return "–"
	case res.Err != nil:
		return "failed"
	}
	var rounds []string
	for _, v := range res.Rounds {
		rounds = append(rounds, fmt.Sprintf("%.0f", v))
	}
	return fmt.Sprintf("%.1f (%s)", res.rate(), strings.Join(rounds, " / "))
}

// streamRatios compares each proxied path with its baselines.
func (r *report) streamRatios(b *strings.Builder) {
	s := r.Streams
	b.WriteString("### Ratios\n\n| path | over | port-forward, 1 conn | port-forward, 8 conns | exec | `logs -f` |\n|---|---|---:|---:|---:|---:|\n")
	for _, c := range []struct{ path, base string }{
		{"bare", "direct"}, {"gateway", "direct"}, {"gateway", "bare"}, {"hub", "gateway"},
		{"bare-konn", "direct3"}, {"konn", "direct3"}, {"konn", "bare-konn"}, {"hub-konn", "konn"},
	} {
		p, base := s.path(c.path), s.path(c.base)
		if p == nil || base == nil {
			continue
		}
		cells := []string{p.Name, base.Name}
		for _, k := range streamKinds {
			a, z := s.result(c.path, k.Key), s.result(c.base, k.Key)
			if a == nil || z == nil || z.rate() == 0 {
				cells = append(cells, "–")
				continue
			}
			cells = append(cells, fmt.Sprintf("%.2f×", a.rate()/z.rate()))
		}
		fmt.Fprintf(b, "| %s |\n", strings.Join(cells, " | "))
	}
	b.WriteString("\n")
}

// streamCPU is each process's CPU per MB (port-forward and exec together)
// and per 1,000 log lines, on each path.
func (r *report) streamCPU(b *strings.Builder) {
	s := r.Streams
	b.WriteString("### CPU per MB and per 1,000 log lines\n\nEach process's CPU (utime+stime from /proc) over a path's measurements, divided by the MB it moved (port-forward and exec together) or by the thousands of log lines. " +
		"`bench` is hack/bench's own process: the clients, and the fake kubelet with its echo server (hack/localenv runs them in the process that starts it). A role not on a path shows its background CPU.\n\n")
	roles := []string{"gateway", "bare-proxy", "hub", "upstream", "proxy-server+agent", "bench"}
	b.WriteString("| path | " + strings.Join(roles, " /MB | ") + " /MB | gateway /1k lines | bare proxy /1k lines |\n|---|" + strings.Repeat("---:|", len(roles)+2) + "\n")
	for _, p := range s.Paths {
		cells := []string{p.Name}
		for _, role := range roles {
			cells = append(cells, s.cpuCell(p, role))
		}
		logs := s.result(p.Key, "logs")
		for _, role := range []string{"gateway", "bare-proxy"} {
			if c, ok := logs.cpuPerUnit(role); ok {
				cells = append(cells, fmtDur(c*1000))
			} else {
				cells = append(cells, "–")
			}
		}
		fmt.Fprintf(b, "| %s |\n", strings.Join(cells, " | "))
	}
	b.WriteString("\n")
}

// cpuCell is role's CPU per MB on p; "upstream" is p's kube-apiserver and
// "proxy-server+agent" both konnectivity processes.
func (s *streamsResult) cpuCell(p *streamPath, role string) string {
	roles := []string{role}
	switch role {
	case "upstream":
		roles = []string{p.Upstream}
	case "proxy-server+agent":
		roles = []string{"proxy-server", "proxy-agent"}
	}
	var sum time.Duration
	for _, rl := range roles {
		c, ok := s.cpuPerMB(p.Key, rl)
		if !ok {
			return "–"
		}
		sum += c
	}
	return fmtDur(sum)
}

func (s *streamsResult) path(key string) *streamPath {
	for _, p := range s.Paths {
		if p.Key == key {
			return p
		}
	}
	return nil
}

// streamLimits says, for each missed bandwidth goal, what this run shows
// about its cause: the bare proxy on the same path, the CPU per MB, and
// whether the gateway fell short in every round or only in some.
func (r *report) streamLimits(b *strings.Builder) {
	var lines []string
	for _, c := range streamComparisons {
		for _, kind := range byteKinds {
			if line := r.streamLimit(c, kind); line != "" {
				lines = append(lines, line)
			}
		}
	}
	if len(lines) == 0 {
		return
	}
	b.WriteString("### What limits the missed goals\n\n" + strings.Join(lines, "\n") + "\n")
	b.WriteString("\nThe gateway's profiles above show where its own CPU goes during the streams.\n\n")
}

// streamLimit is the line of streamLimits for one comparison and kind, or
// "" when the goal was met or not measured.
func (r *report) streamLimit(c streamComparison, kind string) string {
	s := r.Streams
	gw, base := s.result(c.gw, kind), s.result(c.base, kind)
	if gw == nil || base == nil || gw.rate() >= streamGoalRatio*base.rate() {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "- %s, %s: the gateway reaches %.2f× %s; %s.", kindOf(kind).Name, c.where, gw.rate()/base.rate(), c.baseName, roundsBelow(gw, base))
	if c.base == "direct" {
		r.directLimit(&b, kind, gw, base)
		s.profileLimit(&b, kind)
	} else {
		gc, _ := gw.cpuPerUnit("gateway")
		bc, _ := base.cpuPerUnit("bare-proxy")
		fmt.Fprintf(&b, " CPU per MB: the gateway %s, the bare proxy %s; proxy-server and agent %s on the gateway's path and %s on the bare proxy's (the tunnel is the same).",
			fmtDur(gc), fmtDur(bc), fmtDur(tunnelCPUPerUnit(gw)), fmtDur(tunnelCPUPerUnit(base)))
	}
	return b.String()
}

// directLimit compares, over Direct, the gateway with the bare proxy and
// with what all processes' CPU per MB alone predicts.
func (r *report) directLimit(b *strings.Builder, kind string, gw, d *streamResult) {
	if bare := r.Streams.result("bare", kind); bare != nil {
		gc, _ := gw.cpuPerUnit("gateway")
		bc, _ := bare.cpuPerUnit("bare-proxy")
		fmt.Fprintf(b, " The bare reverse proxy reaches %.2f× direct; the gateway is %.2f× the bare proxy, at %s vs %s CPU per MB.",
			bare.rate()/d.rate(), gw.rate()/bare.rate(), fmtDur(gc), fmtDur(bc))
		if bare.rate() < streamGoalRatio*d.rate() {
			b.WriteString(" A proxy that adds nothing of its own misses the direct bound too: every byte of a proxied stream is decrypted and encrypted once more by " +
				"the proxy, on the CPUs that the client, kube-apiserver and kubelet already share, so the hop's CPU is the bound rather than anything of the gateway's " +
				"(its buffer size, flush interval or HTTP/1.1 upgrade path would show as more CPU per MB than the bare proxy's, or as a lower rate at the same CPU).")
		}
	}
	dt, gt := d.totalCPUPerUnit(), gw.totalCPUPerUnit()
	fmt.Fprintf(b, " All processes together (client, kube-apiserver, proxy, and the background of the others) used %s per MB direct and %s through the gateway: "+
		"a path bound by these %d CPUs would reach %.2f× direct from that alone.", fmtDur(dt), fmtDur(gt), r.Machine.CPUs, ratio(dt, gt))
}

// roundsBelow says in how many interleaved rounds the gateway fell below
// the bound against its baseline, with each round's ratio: short in every
// round is a gap of the path, in some only is the shared CPUs' noise.
func roundsBelow(gw, base *streamResult) string {
	n := min(len(gw.Rounds), len(base.Rounds))
	var below int
	ratios := make([]string, 0, n)
	for i := range n {
		q := gw.Rounds[i] / max(base.Rounds[i], 1e-9)
		if q < streamGoalRatio {
			below++
		}
		ratios = append(ratios, fmt.Sprintf("%.2f×", q))
	}
	return fmt.Sprintf("below %.2f× in %d of %d rounds (%s)", streamGoalRatio, below, n, strings.Join(ratios, " / "))
}

// tunnelCPUPerUnit is the proxy-server's and the agent's CPU per MB
// during r's measurements.
func tunnelCPUPerUnit(r *streamResult) time.Duration {
	s, _ := r.cpuPerUnit("proxy-server")
	a, _ := r.cpuPerUnit("proxy-agent")
	return s + a
}

// profileFor is the gateway's CPU profile during kind over its port, if
// one was taken; port-forward with 8 connections runs the same code as with
// one, whose profile stands for both.
func (s *streamsResult) profileFor(kind string) *pathProfile {
	if kind == "pf8" {
		kind = "pf1"
	}
	for i := range s.Profiles {
		if s.Profiles[i].Key == kind && s.Profiles[i].Top != "" {
			return &s.Profiles[i]
		}
	}
	return nil
}

// flatShare is the share (%) of a pprof -top's samples that functions
// whose names contain any of parts spent in their own code; only the
// functions the top lists are counted.
func flatShare(top string, parts ...string) float64 {
	var sum float64
	for _, line := range strings.Split(top, "\n") {
		f := strings.Fields(line)
		if len(f) != 6 || !strings.HasSuffix(f[1], "%") {
			continue
		}
		pct, err := strconv.ParseFloat(strings.TrimSuffix(f[1], "%"), 64)
		if err != nil {
			continue
		}
		for _, p := range parts {
			if strings.Contains(f[5], p) {
				sum += pct
				break
			}
		}
	}
	return sum
}

// profileLimit says how much of the gateway's profiled CPU went to what
// any proxy of a stream pays: system calls and TLS.
func (s *streamsResult) profileLimit(b *strings.Builder, kind string) {
	p := s.profileFor(kind)
	if p == nil {
		return
	}
	fmt.Fprintf(b, " In the gateway's CPU profile during %s (the functions its top lists, by their own CPU), %.0f%% of the samples are system calls and %.0f%% TLS (crypto/): "+
		"costs of the copy that any TLS-terminating proxy pays, not the gateway's own code.", kindOf(p.Key).Name, flatShare(p.Top, "syscall", "Syscall"), flatShare(p.Top, "crypto/"))
}
