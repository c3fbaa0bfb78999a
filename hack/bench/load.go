package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/clustergateway/cluster-gateway/internal/testfrontend"
)

// target is one way to GET the same object from a managed cluster.
type target struct {
	Key, Name, Via string
	URL            string
	Client         *http.Client
	Upstream       string         // role of the kube-apiserver that answers
	Pids           map[string]int // role -> pid whose CPU is charged to this path
	TODO           string         // set when the path cannot be measured yet
	Workers        int            // keep-alive workers of this load; 0: -concurrency
	FreshClient    *http.Client   // as a caller no load uses, for the window after its decision is filled (sar.go)

	res loadResult
}

// loadResult accumulates a target's rounds.
type loadResult struct {
	Requests, Errors int
	FirstErr         error
	Elapsed          time.Duration
	Lat              []time.Duration
	CPU              map[string]time.Duration // role -> CPU used during the loads; "bench" is this process
	Before, After    gwState                  // the gateway before the first and after the last round
	DCreations       float64                  // pool entries created during the loads
	DMallocs         float64                  // heap objects the gateway allocated during the loads (go_memstats_mallocs_total)
	DAllocBytes      float64                  // and their bytes (go_memstats_alloc_bytes_total)
	DDials           float64                  // pool connections dialed during the loads
	DTunnels         float64                  // konnectivity tunnels built during the loads
	RoundRPS         []float64                // req/s of each round, to show the spread
	Authz            authzDelta               // delegated authorization during the loads (sar.go)
	Steady           authzSteady              // and in a window right after a fresh caller's decision was filled (sar.go)
}

func (r *loadResult) rps() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}

func (r *loadResult) pct(p float64) time.Duration {
	if len(r.Lat) == 0 {
		return 0
	}
	return r.Lat[min(len(r.Lat)-1, int(float64(len(r.Lat))*p))]
}

// cpuPerReq is CPU per successful request of one role.
func (r *loadResult) cpuPerReq(role string) (time.Duration, bool) {
	c, ok := r.CPU[role]
	if !ok || r.Requests == 0 {
		return 0, false
	}
	return c / time.Duration(r.Requests), true
}

// burst runs conc keep-alive workers (t.Workers if set) for d and returns what they saw.
func burst(ctx context.Context, t *target, conc int, d time.Duration) (n, errs int, firstErr error, lat []time.Duration) {
	if t.Workers > 0 {
		conc = t.Workers
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			var bad int
			var werr error
			for ctx.Err() == nil && time.Now().Before(deadline) {
				start := time.Now()
				if err := get(ctx, t.Client, t.URL); err != nil {
					bad++
					if werr == nil {
						werr = err
					}
					time.Sleep(10 * time.Millisecond) // no hot loop on a failing path
					continue
				}
				mine = append(mine, time.Since(start))
			}
			mu.Lock()
			lat = append(lat, mine...)
			errs += bad
			if firstErr == nil {
				firstErr = werr
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return len(lat), errs, firstErr, lat
}

// get is one request of the load (internal/testfrontend's, as pkg/proxy's benchmarks send).
func get(ctx context.Context, c *http.Client, url string) error { return testfrontend.Get(ctx, c, url) }

// runLoads warms every target, then runs rounds in which each target gets
// its share of the duration in turn, so noise from other work on the
// machine spreads over all of them instead of hitting one.
func runLoads(ctx context.Context, gw *gatewayAdmin, targets []*target, conc, rounds int, total, warm time.Duration, profile string) error {
	for _, t := range targets {
		if t.TODO != "" {
			continue
		}
		if _, errs, err, _ := burst(ctx, t, conc, warm); errs > 0 {
			return fmt.Errorf("warm-up of %s: %d errors, first: %v", t.Name, errs, err)
		}
	}
	per := total / time.Duration(rounds)
	for round := range rounds {
		for _, t := range targets {
			if t.TODO != "" {
				continue
			}
			var prof chan error
			path := profilePath(profile, t.Key)
			if path != "" && round == 0 {
				// The heap profile's allocation samples, before and
				// after: what the gateway allocated for the round.
				if err := gw.gc(ctx, allocPath(path, "before")); err != nil {
					return err
				}
				prof = make(chan error, 1)
				go func() { prof <- gw.cpuProfile(ctx, per, path) }()
			}
			if err := runRound(ctx, gw, t, conc, per, round == 0, round == rounds-1); err != nil {
				return err
			}
			if prof != nil {
				if err := <-prof; err != nil {
					return err
				}
				if err := gw.gc(ctx, allocPath(path, "after")); err != nil {
					return err
				}
				logf("gateway CPU profile of the %q load written to %s", t.Name, path)
			}
			logf("round %d/%d %-28s %6.0f req/s so far", round+1, rounds, t.Name, t.res.rps())
		}
	}
	for _, t := range targets {
		slices.Sort(t.res.Lat)
	}
	return ctx.Err()
}

func runRound(ctx context.Context, gw *gatewayAdmin, t *target, conc int, d time.Duration, first, last bool) error {
	r := &t.res
	sars0, err := gw.hubSARs(ctx)
	if err != nil {
		return err
	}
	before, err := gw.state(ctx)
	if err != nil {
		return err
	}
	cpu0, err := cpuOf(t.Pids)
	if err != nil {
		return err
	}
	start := time.Now()
	n, errs, ferr, lat := burst(ctx, t, conc, d)
	elapsed := time.Since(start)
	cpu1, err := cpuOf(t.Pids) // before the scrape, which costs the gateway CPU
	if err != nil {
		return err
	}
	after, err := gw.state(ctx)
	if err != nil {
		return err
	}
	sars1, err := gw.hubSARs(ctx)
	if err != nil {
		return err
	}
	r.Authz.add(authzCount{sars0, before.Delegated}, authzCount{sars1, after.Delegated})
	if r.CPU == nil {
		r.CPU = map[string]time.Duration{}
	}
	for role := range cpu1 {
		r.CPU[role] += cpu1[role] - cpu0[role]
	}
	r.Requests += n
	r.Errors += errs
	if r.FirstErr == nil {
		r.FirstErr = ferr
	}
	r.Elapsed += elapsed
	r.RoundRPS = append(r.RoundRPS, float64(n)/elapsed.Seconds())
	r.Lat = append(r.Lat, lat...)
	r.DCreations += after.Creations - before.Creations
	r.DMallocs += after.Mallocs - before.Mallocs
	r.DAllocBytes += after.AllocBytes - before.AllocBytes
	r.DDials += after.Dials - before.Dials
	r.DTunnels += after.Tunnels - before.Tunnels
	if first {
		r.Before = before
	}
	if last {
		r.After = after
	}
	return nil
}

// cpuOf reads the CPU of every role; "bench" is this process.
func cpuOf(pids map[string]int) (map[string]time.Duration, error) {
	out := map[string]time.Duration{"bench": selfCPU()}
	for role, pid := range pids {
		c, err := procCPU(pid)
		if err != nil {
			return nil, fmt.Errorf("CPU of %s (pid %d): %w", role, pid, err)
		}
		out[role] = c
	}
	return out, nil
}
