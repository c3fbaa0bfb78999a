package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
)

// onlySection checks -only and points the partial report into the state
// dir: a partial report never replaces the whole one (make bench passes -out
// docs/performance.md).
func onlySection(o *options) {
	switch o.Only {
	case "loads":
		o.Gateways = 0 // section 2 alone, without memory per pooled cluster
	case "ab", "isolation", "streams", "watches", "scan":
	default:
		log.Fatalf("-only %q: the sections that run alone are \"loads\", \"ab\", \"isolation\", \"streams\", \"watches\" and \"scan\"", o.Only)
	}
	o.SkipGoBench = true
	o.Out = filepath.Join(o.StateDir, "performance-"+o.Only+".md")
}

// runScanStep runs the scan last: it restarts the gateway.
func runScanStep(ctx context.Context, o options, env *localenv.Env, gw *gatewayAdmin, rep *report) (err error) {
	if o.ScanGateways <= 0 {
		return nil
	}
	logf("scan: %d ClusterGateways, default pool", o.ScanGateways)
	rep.Scan, err = runScan(ctx, env, gw, o.ScanGateways, o.StateDir)
	if rep.Scan != nil {
		rep.Scan.GatewayBin = o.GatewayBin
		if o.GatewayBin == "" {
			rep.Scan.GatewayBin = filepath.Join(o.BinDir, "cluster-gateway")
		}
		rep.Scan.HeapStored = heapTop(ctx, o.Go, o.StateDir, "stored", "before")
		rep.Scan.HeapPooled = heapTop(ctx, o.Go, o.StateDir, "pooled", "stored")
		rep.Scan.HeapAfter = heapTop(ctx, o.Go, o.StateDir, "after", "pooled")
		path := filepath.Join(o.StateDir, idleProfileName)
		if top, perr := pprofTop(ctx, o.Go, "-nodecount="+strconv.Itoa(topFuncs), path); perr == nil {
			rep.Scan.IdleProfile = &pathProfile{Path: path, Top: top}
		} else {
			logf("scan: cannot read the idle CPU profile: %v", perr)
		}
		// The raw figures, next to the heap profiles.
		if raw, jerr := json.MarshalIndent(rep.Scan, "", "  "); jerr == nil {
			err = errors.Join(err, os.WriteFile(filepath.Join(o.StateDir, "scan.json"), raw, 0o644))
		}
	}
	return err
}

// The scan: a controller that lists something in every cluster once a
// minute, with more clusters than the pool holds.
const (
	scanPasses    = 5
	scanClients   = 16
	scanAfter     = time.Minute     // RSS and heap this long after the last pass
	scanSettleMax = 4 * time.Minute // how long to wait for RSS to settle
	// scanIdleProfile is the CPU profile taken at the start of the idle
	// window, which lasts at least four RSS samples (40s).
	scanIdleProfile = 30 * time.Second
	scanWaitMax     = 5 * time.Minute // for the prober (waitMetrics)
	idleProfileName = "gateway-cpu-idle.pprof"
	scanPeakRSSGoal = 300e6 // bytes: 300 MB
	// pkg/pool's default --pool-capacity (pool.NewOptions; importing
	// pkg/pool here would pull its dependencies into hack's go.mod).
	scanDefaultCapacity = 1000
)

// scanState is the gateway at one moment after the scan (no forced GC).
type scanState struct {
	memState
	At time.Duration // since the last pass ended
}

type scanPass struct {
	Duration       time.Duration
	PeakRSS        float64  // VmHWM during the pass
	PeakHeapSample float64  // highest go_memstats_heap_inuse_bytes sampled each second
	End            memState // right after the pass, no forced GC
	Settled        memState // then, after a forced GC
	Errors         int
	FirstErr       error
}

type scanResult struct {
	N, Capacity, Clients int
	GatewayBin           string
	CreateTime           time.Duration
	// ProbedWait is how long the stored row waited, after the gateway had
	// listed every gateway, until the prober had probed each once, and
	// PooledProbedWait how long the pooled row waited after its GETs for
	// one more round of probes: both rows are then in the steady state the
	// scan leaves behind (every cluster's probe state filled, pooled
	// connections that carried probes as well as a GET), so the rows after
	// the scan are compared with like.
	ProbedWait, PooledProbedWait time.Duration
	Base, Stored                 memState // fresh gateway; n stored, none pooled (forced GC)
	// Pooled is Capacity of the gateways with one GET each and nothing
	// evicted yet (forced GC): the per-entry figures come from it.
	Pooled     memState
	PooledN    int
	Passes     []scanPass
	After      memState // scanAfter after the last pass, before a forced GC
	AfterGC    memState // then, after a forced GC
	Settled    memState // RSS once it stopped falling (no forced GC)
	SettledAt  time.Duration
	Stable     bool    // Settled is stable RSS, not the end of scanSettleMax
	FillPeak   float64 // VmHWM from the gateway's start to the first pass
	RSSSamples []scanState
	// Idle is the gateway's CPU from the forced GC scanAfter after the
	// scan until RSS settled: no requests, every gateway stored, the
	// prober at its defaults.
	Idle        idleCPU
	IdleProfile *pathProfile // the idle window's CPU profile
	GatewayArgs []string
	// HeapStored, HeapPooled and HeapAfter are where the live heap grew: the
	// top of the stored profile against the fresh one, of the pooled against
	// the stored, and of the one after the scan against the pooled (go tool
	// pprof -top -diff_base).
	HeapStored, HeapPooled, HeapAfter string
}

// heapTop is `go tool pprof -top` of the in-use heap of step's profile
// less base's, its first lines; empty when pprof fails (the report says
// so).
func heapTop(ctx context.Context, goBin, dir, step, base string) string {
	prof := func(s string) string { return filepath.Join(dir, "gateway-heap-scan-"+s+".pprof") }
	return heapDiffTop(ctx, goBin, prof(step), prof(base))
}

// heapDiffTop is `go tool pprof -top` of the in-use heap of the profile at
// path less the one at base, its first lines; empty when pprof fails.
func heapDiffTop(ctx context.Context, goBin, path, base string) string {
	out, err := pprofTop(ctx, goBin, "-sample_index=inuse_space", "-nodecount=12", "-diff_base="+base, path)
	if err != nil {
		logf("pprof of %s: %v", path, err)
	}
	return out
}

// runScan restarts the gateway with the default pool (no --pool-capacity),
// stores n ClusterGateways (alternately managed-1 and managed-2), and sends
// scanPasses passes of one GET through the hub per gateway with scanClients
// workers, measuring the gateway's memory as it goes. It deletes the
// gateways at the end.
func runScan(ctx context.Context, env *localenv.Env, gw *gatewayAdmin, n int, profileDir string) (*scanResult, error) {
	res := &scanResult{N: n, Clients: scanClients, Capacity: scanDefaultCapacity}
	logf("scan: restarting the gateway with the default pool")
	if err := env.StopGateway(); err != nil {
		return nil, err
	}
	// A non-nil empty list: the standard flags only, so the default
	// --pool-capacity.
	if err := env.StartGateway(ctx, []string{}); err != nil {
		return nil, err
	}
	res.GatewayArgs = env.Gateway.Args
	for _, a := range res.GatewayArgs {
		if strings.HasPrefix(a, "--pool-capacity") {
			return nil, fmt.Errorf("the scan needs the default pool, but the gateway runs with %s", a)
		}
	}
	pid := env.Gateway.Process.Pid()
	settled := func(step string) (memState, error) {
		return medianAfterGC(ctx, gw, filepath.Join(profileDir, "gateway-heap-scan-"+step+".pprof"))
	}
	var err error
	if res.Base, err = settled("before"); err != nil {
		return nil, err
	}

	secrets, err := hubSecrets(env)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	logf("scan: creating %d ClusterGateways", n)
	if err := parallel(ctx, n, scanClients, func(i int) error {
		_, err := secrets.Create(ctx, benchSecret(env, i), metav1.CreateOptions{})
		return err
	}); err != nil {
		return nil, fmt.Errorf("create gateways: %w", err)
	}
	defer func() {
		// Leave the environment as it was, whatever happened.
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := secrets.DeleteCollection(dctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: benchLabel + "=true"}); err != nil {
			logf("scan: deleting the bench gateways: %v", err)
		}
	}()
	if err := waitListed(ctx, gw, n); err != nil {
		return nil, err
	}
	res.CreateTime = time.Since(start)
	if res.ProbedWait, err = waitAllProbed(ctx, gw); err != nil {
		return nil, err
	}
	if res.Stored, err = settled("stored"); err != nil {
		return nil, err
	}

	hubClient, err := mtlsClient(env.Hub.CA.CertPEM, env.Hub.Admin)
	if err != nil {
		return nil, err
	}
	defer hubClient.CloseIdleConnections()
	url := func(i int) string {
		return env.Hub.URL + "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/" + benchName(i) + "/proxy" + requestPath
	}

	// The pool's share: as many gateways as it holds, one GET each, nothing
	// evicted yet (localenv's own entries fill the rest of the default pool
	// only if they are used; the hub's probes do not pool).
	res.PooledN = min(n, res.Capacity-int(res.Stored.Entries))
	if err := parallel(ctx, res.PooledN, scanClients, func(i int) error { return get(ctx, hubClient, url(i)) }); err != nil {
		return nil, fmt.Errorf("fill the pool: %w", err)
	}
	if res.PooledProbedWait, err = waitProbeRound(ctx, gw, n); err != nil {
		return nil, err
	}
	if res.Pooled, err = settled("pooled"); err != nil {
		return nil, err
	}

	if res.FillPeak, err = procHWM(pid); err != nil {
		return nil, err
	}
	for pass := range scanPasses {
		if err := resetPeakRSS(pid); err != nil {
			return nil, err
		}
		var sp scanPass
		stopSampling := sampleHeap(ctx, gw, &sp.PeakHeapSample)
		start := time.Now()
		var mu sync.Mutex
		err := parallel(ctx, n, scanClients, func(i int) error {
			if err := get(ctx, hubClient, url(i)); err != nil {
				mu.Lock()
				if sp.Errors++; sp.FirstErr == nil {
					sp.FirstErr = err
				}
				mu.Unlock()
			}
			return ctx.Err()
		})
		sp.Duration = time.Since(start)
		stopSampling()
		if err != nil {
			return nil, err
		}
		if sp.PeakRSS, err = procHWM(pid); err != nil {
			return nil, err
		}
		if sp.End, err = readMem(ctx, gw); err != nil {
			return nil, err
		}
		if sp.Settled, err = settled(fmt.Sprintf("pass%d", pass+1)); err != nil {
			return nil, err
		}
		logf("scan: pass %d: %s, peak RSS %s, live heap after GC %s, %d errors", pass+1, sp.Duration.Round(100*time.Millisecond), mib(sp.PeakRSS), mib(sp.Settled.Marked), sp.Errors)
		res.Passes = append(res.Passes, sp)
	}

	// Then nothing: how fast does the process give memory back?
	end := time.Now()
	var idleFrom idleMark
	idleProfile := make(chan error, 1)
	var late []float64 // RSS samples from scanAfter on
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Second):
		}
		s, err := readMem(ctx, gw)
		if err != nil {
			return nil, err
		}
		at := time.Since(end)
		res.RSSSamples = append(res.RSSSamples, scanState{memState: s, At: at})
		if at < scanAfter {
			continue
		}
		if res.After.RSS == 0 {
			res.After = s
			if res.AfterGC, err = settled("after"); err != nil {
				return nil, err
			}
			if idleFrom, err = markIdle(ctx, gw, pid); err != nil {
				return nil, err
			}
			// Where the idle CPU goes (the prober): a profile of the
			// first scanIdleProfile of the idle window, beside the heap
			// profiles.
			go func() {
				idleProfile <- gw.cpuProfile(ctx, scanIdleProfile, filepath.Join(profileDir, idleProfileName))
			}()
			continue
		}
		late = append(late, s.RSS)
		// Settled: RSS moved less than 2% over the last 30 s (four
		// samples), all taken after the scanAfter sample, so the settled
		// figure is never the scanAfter one itself.
		if k := len(late); k >= 4 {
			lo, hi := late[k-4], late[k-4]
			for _, v := range late[k-4:] {
				lo, hi = min(lo, v), max(hi, v)
			}
			if hi-lo <= 0.02*hi {
				res.Settled, res.SettledAt, res.Stable = s, at, true
				break
			}
		}
		if at >= scanSettleMax {
			res.Settled, res.SettledAt = s, at
			break
		}
	}
	idleTo, err := markIdle(ctx, gw, pid)
	if err != nil {
		return nil, err
	}
	if !idleFrom.at.IsZero() { // the profile was started
		if err := <-idleProfile; err != nil {
			logf("scan: idle CPU profile: %v", err)
		}
	}
	res.Idle = idleFrom.until(idleTo)
	return res, nil
}

// waitAllProbed waits until the prober has probed every cluster once: none
// is Unknown any more (cluster_gateway_health_clusters; every bench cluster
// answers its probe).
func waitAllProbed(ctx context.Context, gw *gatewayAdmin) (time.Duration, error) {
	return waitMetrics(ctx, gw, "every cluster probed", func(m map[string]float64) (bool, error) {
		for k, v := range m {
			if strings.HasPrefix(k, mClusters+"{") && strings.Contains(k, `reachable="Unknown"`) {
				return v == 0, nil
			}
		}
		return false, fmt.Errorf("the gateway's /metrics has no %s{reachable=\"Unknown\"}", mClusters)
	})
}

// waitProbeRound waits until the prober has made n more probes: with n
// clusters, taken round-robin from its queue, about one more each.
func waitProbeRound(ctx context.Context, gw *gatewayAdmin, n int) (time.Duration, error) {
	m, err := gw.metrics(ctx)
	if err != nil {
		return 0, err
	}
	from := sumOf(m, mProbes)
	return waitMetrics(ctx, gw, fmt.Sprintf("%d more probes", n), func(m map[string]float64) (bool, error) {
		return sumOf(m, mProbes)-from >= float64(n), nil
	})
}

// waitMetrics reads the gateway's /metrics every second until done says
// so (or fails), for up to scanWaitMax, and returns how long it waited;
// what names the wait in its error.
func waitMetrics(ctx context.Context, gw *gatewayAdmin, what string, done func(map[string]float64) (bool, error)) (time.Duration, error) {
	start := time.Now()
	var scrapeErr, doneErr error
	err := wait.PollUntilContextTimeout(ctx, time.Second, scanWaitMax, true, func(ctx context.Context) (bool, error) {
		m, err := gw.metrics(ctx)
		if scrapeErr = err; err != nil {
			return false, nil // retried until the timeout
		}
		ok, err := done(m)
		doneErr = err
		return ok, err
	})
	switch {
	case err == nil:
		return time.Since(start), nil
	case doneErr != nil:
		return 0, doneErr
	case ctx.Err() != nil:
		return 0, ctx.Err()
	}
	return 0, fmt.Errorf("%s: not after %s (last scrape error: %v)", what, time.Since(start).Round(time.Second), scrapeErr)
}

// idleCPU is what the gateway spends with nobody sending it a request.
type idleCPU struct {
	Window       time.Duration
	Cores        float64 // CPU time over the window
	ProbesPerSec float64 // cluster_gateway_health_probes_total's rate
}

// idleMark is the gateway's CPU time and probe count at one moment.
type idleMark struct {
	at     time.Time
	cpu    time.Duration
	probes float64
}

func markIdle(ctx context.Context, gw *gatewayAdmin, pid int) (idleMark, error) {
	cpu, err := procCPU(pid)
	if err != nil {
		return idleMark{}, err
	}
	m, err := gw.metrics(ctx)
	if err != nil {
		return idleMark{}, err
	}
	return idleMark{at: time.Now(), cpu: cpu, probes: sumOf(m, mProbes)}, nil
}

func (a idleMark) until(b idleMark) idleCPU {
	w := b.at.Sub(a.at)
	if w <= 0 {
		return idleCPU{}
	}
	return idleCPU{Window: w, Cores: float64(b.cpu-a.cpu) / float64(w), ProbesPerSec: (b.probes - a.probes) / w.Seconds()}
}

// settleSamples is how many forced GCs, a second apart, medianAfterGC
// takes.
const settleSamples = 5

// medianAfterGC forces a GC in the gateway and reads its memory
// settleSamples times, a second apart, and returns the sample whose marked
// heap is the median; the heap profile saved at save is that sample's. With
// 10,000 gateways stored the prober builds hundreds of transient entries a
// second (handshakes, parsed TLS material), and whichever are in flight at
// a GC move a single sample's live heap by megabytes, which the per-entry
// size (a difference of two such samples) would carry.
func medianAfterGC(ctx context.Context, gw *gatewayAdmin, save string) (memState, error) {
	type sample struct {
		m       memState
		profile string
	}
	var samples []sample
	defer func() {
		for _, s := range samples {
			os.Remove(s.profile)
		}
	}()
	for i := range settleSamples {
		if i > 0 {
			select {
			case <-ctx.Done():
				return memState{}, ctx.Err()
			case <-time.After(time.Second):
			}
		}
		profile := fmt.Sprintf("%s.%d", save, i)
		m, err := afterGC(ctx, gw, profile)
		samples = append(samples, sample{m, profile})
		if err != nil {
			return memState{}, err
		}
	}
	slices.SortFunc(samples, func(a, b sample) int { return cmp.Compare(a.m.Marked, b.m.Marked) })
	median := samples[len(samples)/2]
	if err := os.Rename(median.profile, save); err != nil {
		return memState{}, err
	}
	return median.m, nil
}

// afterGC forces a GC in the gateway, saving its heap profile at save, and
// reads its memory.
func afterGC(ctx context.Context, gw *gatewayAdmin, save string) (memState, error) {
	if err := gw.gc(ctx, save); err != nil {
		return memState{}, err
	}
	return readMem(ctx, gw)
}

// memState is gwState plus the live heap, go_memstats_heap_alloc_bytes:
// right after a forced GC it is what survived the GC, while heap in use also
// counts the free room of every span that holds a live object.
//
// Marked is the heap the last GC marked live (go_gc_heap_live_bytes, the
// runtime's /gc/heap/live:bytes). Unlike heap_alloc it does not grow with
// what is allocated between the forced GC and the scrape, and unlike an
// estimate from the heap goal it does not depend on GOGC.
type memState struct {
	gwState
	Live, Marked float64
	RSSFile      float64 // of RSS, the pages mapped from files (the binary's code and data)
}

func readMem(ctx context.Context, gw *gatewayAdmin) (memState, error) {
	m, err := gw.metrics(ctx)
	if err != nil {
		return memState{}, err
	}
	rss, err := procRSS(gw.env.Gateway.Process.Pid())
	if err != nil {
		return memState{}, err
	}
	rssFile, err := procStatus(gw.env.Gateway.Process.Pid(), "RssFile")
	if err != nil {
		return memState{}, err
	}
	marked, ok := m["go_gc_heap_live_bytes"]
	if !ok {
		return memState{}, errors.New("the gateway's /metrics has no go_gc_heap_live_bytes (the Go runtime's /gc/heap/live:bytes): the live heap cannot be read")
	}
	return memState{Live: m[mHeapAlloc], Marked: marked, RSSFile: rssFile, gwState: gwState{
		RSS: rss, Heap: m[mHeapInuse], Goroutines: m[mGoroutines],
		Creations: m[mCreations], Dials: m[mDials], Tunnels: m[mTunnels],
		Entries: m[mEntries], Retiring: m[mRetiring], OpenConns: m[mOpenConns],
	}}, nil
}

const mHeapAlloc = "go_memstats_heap_alloc_bytes"

// sampleHeap records the highest heap in use seen once a second until the
// returned func is called.
func sampleHeap(ctx context.Context, gw *gatewayAdmin, peak *float64) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			if m, err := gw.metrics(ctx); err == nil {
				*peak = max(*peak, m[mHeapInuse])
			}
		}
	}()
	return func() { cancel(); <-done }
}

// resetPeakRSS resets the process's VmHWM to its current RSS.
func resetPeakRSS(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}
