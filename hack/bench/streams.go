package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
)

// Flags of the streams section, registered beside main's.
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

// streamKind is one kind of stream the section measures.
type streamKind struct {
	Key, Name, Unit string
	// Profiled: the gateway is CPU-profiled during its first round over
	// the gateway port (port-forward with 8 connections runs the same
	// code as with one, so it is not).
	Profiled bool
	// run streams for about d over p and returns the units it moved and
	// the time it took.
	run func(ctx context.Context, p *streamPath, d time.Duration) (float64, time.Duration, error)
}

// parallelStreams is how many port-forward connections run at once in the
// parallel measurement.
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

// result is key's result on path, nil when it was not measured.
func (s *streamsResult) result(path, kind string) *streamResult {
	if s == nil {
		return nil
	}
	for _, p := range s.Paths {
		if p.Key == path {
			if r := p.res[kind]; r != nil && r.Units > 0 && r.Err == nil {
				return r
			}
		}
	}
	return nil
}

// runStreams measures every kind of stream over every path, in interleaved
// rounds: each round runs each kind over each path in turn.
func runStreams(ctx context.Context, o options, env *localenv.Env, gw *gatewayAdmin) (res *streamsResult, err error) {
	if *streamProtocol != "websocket" && *streamProtocol != "spdy" {
		return nil, fmt.Errorf("-stream-protocol %q: use websocket or spdy", *streamProtocol)
	}
	paths, stop, err := streamPaths(ctx, env)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, stop()) }()
	for _, p := range paths {
		if err := p.open(ctx); err != nil {
			return nil, err
		}
	}
	res = &streamsResult{Paths: paths, Protocol: *streamProtocol, Rounds: *streamRounds, Time: *streamTime}
	// Warm-up: every path and kind once, briefly. A kind that fails on a
	// path is reported with its error and not measured there; the others
	// go on.
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
				profile := ""
				if round == 0 && p.Key == "gateway" && o.GatewayProfile != "" && k.Profiled {
					profile = streamProfilePath(o, k.Key)
				}
				if err := p.measure(ctx, gw, k, profile); err != nil {
					return nil, err
				}
				logf("streams: round %d/%d %-30s %-38s %8.1f %s so far", round+1, *streamRounds, k.Name, p.Name, p.res[k.Key].rate(), k.Unit)
			}
		}
	}
	for _, k := range streamKinds {
		if o.GatewayProfile == "" || !k.Profiled {
			continue
		}
		path := streamProfilePath(o, k.Key)
		top, perr := pprofTop(ctx, o.Go, "-nodecount=15", path)
		if perr != nil {
			logf("streams: cannot read the gateway profile %s: %v", path, perr)
		}
		res.Profiles = append(res.Profiles, pathProfile{Key: k.Key, What: "during " + k.Name + " over the gateway port (Direct)", Path: path, Top: top})
	}
	return res, ctx.Err()
}

// streamProfilePath is where the gateway's CPU profile during the first
// round of kind over the gateway port goes.
func streamProfilePath(o options, kind string) string {
	return filepath.Join(o.StateDir, "gateway-streams-"+kind+".pprof")
}

// measure runs kind over p once and adds what it moved and the CPU of p's
// processes to p's result; with profile set, the gateway is CPU-profiled
// meanwhile.
func (p *streamPath) measure(ctx context.Context, gw *gatewayAdmin, k streamKind, profile string) error {
	r := p.res[k.Key]
	if r == nil {
		r = &streamResult{CPU: map[string]time.Duration{}}
		p.res[k.Key] = r
	}
	var prof chan error
	if profile != "" {
		prof = make(chan error, 1)
		go func() { prof <- gw.cpuProfile(ctx, *streamTime, profile) }()
	}
	cpu0, err := cpuOf(p.Pids)
	if err != nil {
		return err
	}
	units, elapsed, runErr := k.run(ctx, p, *streamTime)
	cpu1, err := cpuOf(p.Pids)
	if err != nil {
		return err
	}
	if prof != nil {
		if err := <-prof; err != nil {
			return err
		}
	}
	if runErr != nil {
		r.Err = runErr
		logf("streams: %s over %s failed; its rounds so far are not reported: %v", k.Name, p.Name, runErr)
		return ctx.Err()
	}
	for role := range cpu1 {
		r.CPU[role] += cpu1[role] - cpu0[role]
	}
	r.Units += units
	r.Elapsed += elapsed
	r.Rounds = append(r.Rounds, units/elapsed.Seconds())
	return nil
}
