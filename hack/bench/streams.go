package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
)

var (
	streamTime     = flag.Duration("stream-time", 2*time.Second, "streams: time of each measurement (one path, one kind of stream) per round")
	streamRounds   = flag.Int("stream-rounds", 3, "streams: interleaved rounds of every path and kind of stream")
	streamProtocol = flag.String("stream-protocol", "websocket", `streams: "websocket" (kubectl's default since 1.31, no fallback: a path that cannot upgrade fails) or "spdy"`)
)

// streamPath is one way to reach the bulk pod's streams (localenv.BulkPod):
// Base + /api/v1/... is the managed cluster's API.
type streamPath struct {
	Key, Name, Via string
	Base           string
	CAPEM          []byte
	Cred           *localenv.KeyPair // client certificate; nil for the bare proxy
	Upstream       string            // role of the kube-apiserver that answers
	Konn           bool              // through the konnectivity tunnel
	Pids           map[string]int    // role -> pid whose CPU is charged to this path

	cfg  *rest.Config
	logs *http.Client
	fwd  *forward // its port-forward, kept for the whole section
	res  map[string]*streamResult
}

// streamResult accumulates one kind of stream over the rounds of one path.
type streamResult struct {
	Units   float64 // MB (bytes/1e6) or lines
	Elapsed time.Duration
	Rounds  []float64                // units per second of each round
	CPU     map[string]time.Duration // role -> CPU during the measurements
	Err     error                    // the first error
}

func (r *streamResult) rate() float64 {
	if r == nil || r.Elapsed <= 0 {
		return 0
	}
	return r.Units / r.Elapsed.Seconds()
}

// totalCPUPerUnit is the CPU of every process read, per MB (or line).
func (r *streamResult) totalCPUPerUnit() time.Duration {
	var sum time.Duration
	for _, c := range r.CPU {
		sum += c
	}
	return time.Duration(float64(sum) / max(r.Units, 1e-9))
}

// cpuPerUnit is role's CPU per MB (or line); false without a measurement.
func (r *streamResult) cpuPerUnit(role string) (time.Duration, bool) {
	if r == nil || r.Units <= 0 {
		return 0, false
	}
	c, ok := r.CPU[role]
	return time.Duration(float64(c) / r.Units), ok
}

// streamKind is one kind of stream the section measures; run streams for
// about d over p and returns the units it moved and the time it took.
type streamKind struct {
	Key, Name, Unit string
	Profiled        bool // the gateway is CPU-profiled in its first round over the port (pf8 runs pf1's code)
	run             func(ctx context.Context, p *streamPath, d time.Duration) (float64, time.Duration, error)
}

// parallelStreams is how many port-forward connections run at once in pf8.
const parallelStreams = 8

var streamKinds = []streamKind{
	{Key: "pf1", Name: "port-forward, 1 connection", Unit: "MB/s", Profiled: true, run: func(ctx context.Context, p *streamPath, d time.Duration) (float64, time.Duration, error) {
		return p.fwd.echo(ctx, 1, d)
	}},
	{Key: "pf8", Name: fmt.Sprintf("port-forward, %d connections", parallelStreams), Unit: "MB/s", run: func(ctx context.Context, p *streamPath, d time.Duration) (float64, time.Duration, error) {
		return p.fwd.echo(ctx, parallelStreams, d)
	}},
	{Key: "exec", Name: "exec, stdin → `cat` → stdout", Unit: "MB/s", Profiled: true, run: execCat},
	{Key: "logs", Name: "`logs -f`", Unit: "lines/s", Profiled: true, run: followLogs},
}

// streamsResult is the streams section.
type streamsResult struct {
	Paths    []*streamPath
	Protocol string
	Rounds   int
	Time     time.Duration
	Profiles []pathProfile
}

// result is kind's result on path, nil unless it was measured.
func (s *streamsResult) result(path, kind string) *streamResult {
	if p := s.path(path); p != nil {
		if r := p.res[kind]; r != nil && r.Units > 0 && r.Err == nil {
			return r
		}
	}
	return nil
}

func (s *streamsResult) path(key string) *streamPath {
	if s == nil {
		return nil
	}
	return byKey(s.Paths, key, func(p *streamPath) string { return p.Key })
}

// runStreams measures every kind of stream over every path in interleaved
// rounds (each kind over each path in turn), the gateway CPU-profiled
// during the first round of each profiled kind over its port.
func runStreams(ctx context.Context, s *session) (err error) {
	logf("streams: port-forward, exec and logs -f over every path")
	if *streamProtocol != "websocket" && *streamProtocol != "spdy" {
		return fmt.Errorf("-stream-protocol %q: use websocket or spdy", *streamProtocol)
	}
	o := s.o
	paths, stop, err := streamPaths(ctx, s.env)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, stop()) }()
	for _, p := range paths {
		if err := p.open(ctx); err != nil {
			return err
		}
	}
	res := &streamsResult{Paths: paths, Protocol: *streamProtocol, Rounds: *streamRounds, Time: *streamTime}
	s.rep.Streams = res
	profile := func(kind string) string { return filepath.Join(o.StateDir, "gateway-streams-"+kind+".pprof") }
	// Warm-up: a kind that fails on a path is reported and not measured there.
	for _, k := range streamKinds {
		for _, p := range paths {
			if _, _, err := k.run(ctx, p, *streamTime/4); err != nil {
				p.res[k.Key] = &streamResult{Err: err}
				logf("streams: %s over %s failed, not measured: %v", k.Name, p.Name, err)
			}
		}
	}
	for round := range *streamRounds {
		for _, k := range streamKinds {
			for _, p := range paths {
				if r := p.res[k.Key]; r != nil && r.Err != nil {
					continue
				}
				measure := func() error { return p.measure(ctx, k) }
				var err error
				if round == 0 && p.Key == "gateway" && o.GatewayProfile != "" && k.Profiled {
					err = s.gw.withCPUProfile(ctx, *streamTime, profile(k.Key), measure)
				} else {
					err = measure()
				}
				if err != nil {
					return err
				}
				logf("streams: round %d/%d %-30s %-38s %8.1f %s so far", round+1, *streamRounds, k.Name, p.Name, p.res[k.Key].rate(), k.Unit)
			}
		}
	}
	for _, k := range streamKinds {
		if o.GatewayProfile != "" && k.Profiled {
			top, perr := pprofTop(ctx, o.Go, "-nodecount=15", profile(k.Key))
			if perr != nil {
				logf("streams: cannot read the gateway profile %s: %v", profile(k.Key), perr)
			}
			res.Profiles = append(res.Profiles, pathProfile{Key: k.Key, What: "during " + k.Name + " over the gateway port (Direct)", Path: profile(k.Key), Top: top})
		}
	}
	return ctx.Err()
}

// measure runs kind over p once and adds what it moved and the CPU of p's
// processes to p's result.
func (p *streamPath) measure(ctx context.Context, k streamKind) error {
	r := p.res[k.Key]
	if r == nil {
		r = &streamResult{}
		p.res[k.Key] = r
	}
	var units float64
	var elapsed time.Duration
	var runErr error
	cpu, err := cpuDuring(p.Pids, func() error { units, elapsed, runErr = k.run(ctx, p, *streamTime); return nil })
	if err != nil {
		return err
	}
	if runErr != nil {
		r.Err = runErr
		logf("streams: %s over %s failed; its rounds so far are not reported: %v", k.Name, p.Name, runErr)
		return ctx.Err()
	}
	r.CPU, r.Units, r.Elapsed = addCPU(r.CPU, cpu), r.Units+units, r.Elapsed+elapsed
	r.Rounds = append(r.Rounds, units/elapsed.Seconds())
	return nil
}

// The section's bounds: bandwidth ≥ 0.90× the baseline, gateway CPU per MB
// ≤ 1.2× the bare proxy's.
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

// streamComparisons are the bandwidth goals' pairs of paths, the gateway's
// and its baseline's, over Direct and over Konnectivity.
var streamComparisons = []struct{ gw, base, baseName, where string }{
	{"gateway", "direct", "direct", "Direct"},
	{"konn", "bare-konn", "the bare proxy over the same tunnel", "Konnectivity"},
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
		cpu, mb = cpu+c, mb+res.Units
	}
	return time.Duration(float64(cpu) / mb), mb > 0
}

// The tables and figures of section 6 (report.md.tmpl).

// Rate is kind's rate on p and its rounds' as a cell.
func (p *streamPath) Rate(kind string) string {
	switch res := p.res[kind]; {
	case res == nil:
		return "–"
	case res.Err != nil:
		return "failed"
	default:
		return fmt.Sprintf("%.1f (%s)", res.rate(), numList(res.Rounds))
	}
}

// RatioRows are the pairs of paths the ratio table compares, where both ran.
func (s *streamsResult) RatioRows() (out [][2]*streamPath) {
	for _, c := range [][2]string{
		{"bare", "direct"}, {"gateway", "direct"}, {"gateway", "bare"}, {"hub", "gateway"},
		{"bare-konn", "direct3"}, {"konn", "direct3"}, {"konn", "bare-konn"}, {"hub-konn", "konn"},
	} {
		if p, base := s.path(c[0]), s.path(c[1]); p != nil && base != nil {
			out = append(out, [2]*streamPath{p, base})
		}
	}
	return out
}

// Ratio is kind's rate on p over base's as a cell.
func (s *streamsResult) Ratio(p, base *streamPath, kind string) string {
	if a, z := s.result(p.Key, kind), s.result(base.Key, kind); a != nil && z != nil && z.rate() != 0 {
		return x(a.rate() / z.rate())
	}
	return "–"
}

// LogCPU is role's CPU per 1,000 log lines on p as a cell.
func (s *streamsResult) LogCPU(p *streamPath, role string) string {
	if c, ok := s.result(p.Key, "logs").cpuPerUnit(role); ok {
		return fmtDur(c * 1000)
	}
	return "–"
}

// CPUCell is role's CPU per MB on p; "upstream" is p's kube-apiserver and
// "proxy-server+agent" both konnectivity processes.
func (s *streamsResult) CPUCell(p *streamPath, role string) string {
	roles, ok := map[string][]string{"upstream": {p.Upstream}, "proxy-server+agent": {"proxy-server", "proxy-agent"}}[role]
	if !ok {
		roles = []string{role}
	}
	return cpuSum(func(role string) (time.Duration, bool) { return s.cpuPerMB(p.Key, role) }, roles)
}

// Failures are the kinds of stream that failed on a path.
func (s *streamsResult) Failures() []string {
	var out []string
	for _, p := range s.Paths {
		for _, k := range streamKinds {
			if res := p.res[k.Key]; res != nil && res.Err != nil {
				out = append(out, fmt.Sprintf("**%s over %s failed**: `%v`", k.Name, p.Name, res.Err))
			}
		}
	}
	return out
}

// streamLimit is what this run shows about a missed bandwidth goal: in how
// many rounds the gateway fell short (every round: a gap of the path; some:
// noise), the bare proxy on the same path, and the CPU per MB.
type streamLimit struct {
	Kind                  streamKind
	Where, BaseName       string
	Ratio, Bound          float64
	Below                 int
	RoundRatios           []string
	Direct                bool
	GwCPU, BareCPU        time.Duration // per MB
	Bare                  bool          // over Direct: the bare proxy was measured
	BareRatio, GwOverBare float64
	DirectTotal, GwTotal  time.Duration // every process's CPU per MB
	CPUs                  int
	Profile               *pathProfile
	Syscalls, TLS         float64 // % of the profile's samples
	TunnelGw, TunnelBase  time.Duration
}

// StreamLimits are the missed bandwidth goals' streamLimits.
func (r *report) StreamLimits() []streamLimit {
	s := r.Streams
	var out []streamLimit
	for _, c := range streamComparisons {
		for _, kind := range byteKinds {
			gw, base := s.result(c.gw, kind), s.result(c.base, kind)
			if gw == nil || base == nil || gw.rate() >= streamGoalRatio*base.rate() {
				continue
			}
			l := streamLimit{Kind: kindOf(kind), Where: c.where, BaseName: c.baseName, Ratio: gw.rate() / base.rate(), Bound: streamGoalRatio, Direct: c.base == "direct", CPUs: r.Machine.CPUs}
			for i := range min(len(gw.Rounds), len(base.Rounds)) {
				q := gw.Rounds[i] / max(base.Rounds[i], 1e-9)
				if q < streamGoalRatio {
					l.Below++
				}
				l.RoundRatios = append(l.RoundRatios, x(q))
			}
			l.GwCPU, _ = gw.cpuPerUnit("gateway")
			if !l.Direct {
				l.BareCPU, _ = base.cpuPerUnit("bare-proxy")
				l.TunnelGw, l.TunnelBase = tunnelCPUPerUnit(gw), tunnelCPUPerUnit(base)
				out = append(out, l)
				continue
			}
			if bare := s.result("bare", kind); bare != nil {
				l.Bare, l.BareRatio, l.GwOverBare = true, bare.rate()/base.rate(), gw.rate()/bare.rate()
				l.BareCPU, _ = bare.cpuPerUnit("bare-proxy")
			}
			l.DirectTotal, l.GwTotal = base.totalCPUPerUnit(), gw.totalCPUPerUnit()
			if l.Profile = s.profileFor(kind); l.Profile != nil {
				l.Syscalls, l.TLS = flatShare(l.Profile.Top, "syscall", "Syscall"), flatShare(l.Profile.Top, "crypto/")
			}
			out = append(out, l)
		}
	}
	return out
}

// BareMisses says whether the bare proxy misses the bound against direct too.
func (l streamLimit) BareMisses() bool { return l.Bare && l.BareRatio < streamGoalRatio }

// ProfileKind is the kind of stream the profile was taken during.
func (l streamLimit) ProfileKind() string { return kindOf(l.Profile.Key).Name }

// tunnelCPUPerUnit is the proxy-server's and the agent's CPU per MB.
func tunnelCPUPerUnit(r *streamResult) time.Duration {
	s, _ := r.cpuPerUnit("proxy-server")
	a, _ := r.cpuPerUnit("proxy-agent")
	return s + a
}

// profileFor is the gateway's CPU profile during kind over its port, if
// one was taken; pf1's stands for pf8.
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

// flatShare is the share (%) of a pprof top's samples spent in the own code
// of the listed functions whose names contain any of parts.
func flatShare(top string, parts ...string) (sum float64) {
	for _, line := range strings.Split(top, "\n") {
		f := strings.Fields(line)
		if len(f) != 6 || !strings.HasSuffix(f[1], "%") {
			continue
		}
		pct, err := strconv.ParseFloat(strings.TrimSuffix(f[1], "%"), 64)
		for _, p := range parts {
			if err == nil && strings.Contains(f[5], p) {
				sum += pct
				break
			}
		}
	}
	return sum
}
