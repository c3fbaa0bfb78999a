package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
)

// The scan: a controller that lists something in every cluster once a
// minute, with more clusters than the pool holds.
const (
	scanPasses, scanClients = 5, 16
	scanAfter               = time.Minute      // RSS and heap this long after the last pass
	scanSettleMax           = 4 * time.Minute  // how long to wait for RSS to settle
	scanIdleProfile         = 30 * time.Second // of the idle window (at least four 10s RSS samples)
	scanWaitMax             = 5 * time.Minute  // for the prober (waitMetrics)
	idleProfileName         = "gateway-cpu-idle.pprof"
	scanPeakRSSGoal         = 300e6                 // bytes: 300 MB, at every moment: creating, scanning
	createSampleEvery       = 20 * time.Millisecond // VmRSS reads while the gateways are created
	// pkg/pool's default --pool-capacity (importing pkg/pool would pull its
	// dependencies into hack's go.mod).
	scanDefaultCapacity = 1000
	// The "live heap after eviction" goal's tolerance: heap figures move by a
	// few MiB between forced GCs.
	scanHeapTolerance = 1.10
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
	// The stored row waits for every cluster probed once, the pooled row for
	// one more round of probes: both then are in the state a scan leaves.
	ProbedWait, PooledProbedWait time.Duration
	Base, Stored                 memState // fresh gateway; n stored, none pooled (forced GC)
	Pooled                       memState // the pool full, nothing evicted (forced GC): the per-entry figures
	PooledN                      int
	Passes                       []scanPass
	After                        memState // scanAfter after the last pass, before a forced GC
	AfterGC                      memState // then, after a forced GC
	Settled                      memState // RSS once it stopped falling (no forced GC)
	SettledAt                    time.Duration
	Stable                       bool // Settled is stable RSS, not the end of scanSettleMax
	// Each phase's own peak RSS (VmHWM, reset as the phase begins): from the
	// gateway's start to the first create (the fresh row); from the end of
	// creating through the stored row's forced GCs; filling the pool (its
	// GETs, a round of probes, the pooled row's forced GCs).
	StartPeak, StoredPeak, FillPeak float64
	// VmHWM while the N gateways were created and probed (CreateWindow), and
	// the most of CreateSamples reads of VmRSS meanwhile.
	CreatePeak, CreateSampled float64
	CreateSamples             int
	CreateWindow              time.Duration
	RSSSamples                []scanState
	Idle                      idleCPU // from the forced GC scanAfter after the scan until RSS settled

	IdleProfile *pathProfile // the idle window's CPU profile
	GatewayArgs []string
	// Where the live heap grew: stored less fresh, pooled less stored, after
	// the scan less pooled (pprof -top -diff_base).
	HeapStored, HeapPooled, HeapAfter string
}

// scanner runs the scan's steps, each filling its part of res.
type scanner struct {
	s       *session
	env     *localenv.Env
	gw      *gatewayAdmin
	dir     string // the state directory, for the heap and CPU profiles
	res     *scanResult
	pid     int
	secrets corev1client.SecretInterface
	hub     *http.Client
}

// runScan restarts the gateway with the default pool, stores n
// ClusterGateways, sends scanPasses passes of one GET per gateway through
// the hub, and measures the gateway's memory throughout and its CPU once
// idle; it deletes the gateways at the end.
func runScan(ctx context.Context, s *session) (err error) {
	n := s.o.ScanGateways
	if n <= 0 {
		return nil
	}
	logf("scan: %d ClusterGateways, default pool", n)
	sc := &scanner{s: s, env: s.env, gw: s.gw, dir: s.o.StateDir, res: &scanResult{N: n, Clients: scanClients, Capacity: scanDefaultCapacity, GatewayBin: cmp.Or(s.o.GatewayBin, filepath.Join(s.o.BinDir, "cluster-gateway"))}}
	s.rep.Scan = sc.res
	sc.secrets, err = hubSecrets(s.env)
	if err == nil {
		sc.hub, err = mtlsClient(s.env.Hub.CA.CertPEM, s.env.Hub.Admin)
	}
	if err != nil {
		return err
	}
	defer sc.hub.CloseIdleConnections()
	defer deleteLabelled(sc.secrets, benchLabel, "scan")
	for _, step := range []func(context.Context) error{sc.restart, sc.store, sc.fillPool, sc.passes, sc.idle} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	sc.readProfiles(ctx, s.o.Go)
	raw, err := json.MarshalIndent(sc.res, "", "  ") // the raw figures, next to the heap profiles
	return errors.Join(err, os.WriteFile(filepath.Join(sc.dir, "scan.json"), raw, 0o644))
}

// settled is medianAfterGC, the heap profile saved as step's.
func (sc *scanner) settled(ctx context.Context, step string) (memState, error) {
	return medianAfterGC(ctx, sc.gw, filepath.Join(sc.dir, "gateway-heap-scan-"+step+".pprof"))
}

// restart restarts the gateway with the default pool, and reads it fresh.
func (sc *scanner) restart(ctx context.Context) (err error) {
	logf("scan: restarting the gateway with the default pool")
	// A non-nil empty list: the standard flags only.
	if err := sc.s.restartGateway(ctx, []string{}); err != nil {
		return err
	}
	sc.res.GatewayArgs, sc.pid = sc.env.Gateway.Args, sc.env.Gateway.Process.Pid()
	for _, a := range sc.res.GatewayArgs {
		if strings.HasPrefix(a, "--pool-capacity") {
			return fmt.Errorf("the scan needs the default pool, but the gateway runs with %s", a)
		}
	}
	sc.res.Base, err = sc.settled(ctx, "before")
	return err
}

// store creates the gateways, waits until the gateway lists them and has
// probed each once, and reads it; meanwhile it reads the peak RSS (VmHWM,
// reset first; StartPeak keeps what came before) and samples VmRSS. The
// stored row's forced GCs have their own peak (StoredPeak).
func (sc *scanner) store(ctx context.Context) (err error) {
	res := sc.res
	if res.StartPeak, err = sc.peakSinceReset(); err != nil {
		return err
	}
	stop := sampleMax(createSampleEvery, rssOf(sc.pid))
	logf("scan: creating %d ClusterGateways", res.N)
	start := time.Now()
	err = createGateways(ctx, sc.secrets, sc.env, sc.gw, res.N, scanClients)
	res.CreateTime = time.Since(start)
	if err == nil {
		res.ProbedWait, err = waitAllProbed(ctx, sc.gw)
	}
	res.CreateWindow = time.Since(start)
	res.CreateSampled, res.CreateSamples = stop()
	if err != nil {
		return err
	}
	if res.CreatePeak, err = sc.peakSinceReset(); err != nil {
		return err
	}
	logf("scan: creating: peak RSS %s (VmHWM), %s sampled", mib(res.CreatePeak), mib(res.CreateSampled))
	if res.Stored, err = sc.settled(ctx, "stored"); err != nil {
		return err
	}
	res.StoredPeak, err = sc.peakSinceReset()
	return err
}

// peakSinceReset reads the gateway's VmHWM and resets it, so that the next
// phase reads a peak of its own.
func (sc *scanner) peakSinceReset() (float64, error) {
	hwm, err := procHWM(sc.pid)
	if err != nil {
		return 0, err
	}
	return hwm, resetPeakRSS(sc.pid)
}

// url is the object every scan request GETs, of gateway i through the hub.
func (sc *scanner) url(i int) string {
	return sc.env.Hub.URL + gatewaysPath + benchName(i) + "/proxy" + requestPath
}

// fillPool sends one GET to as many gateways as the pool holds (nothing
// evicted yet), waits for one more round of probes, and reads the gateway,
// with the peak RSS of all that (VmHWM, reset after the stored row).
func (sc *scanner) fillPool(ctx context.Context) (err error) {
	res := sc.res
	res.PooledN = min(res.N, res.Capacity-int(res.Stored.Entries))
	if err := parallel(ctx, res.PooledN, scanClients, func(i int) error { return get(ctx, sc.hub, sc.url(i)) }); err != nil {
		return fmt.Errorf("fill the pool: %w", err)
	}
	if res.PooledProbedWait, err = waitProbeRound(ctx, sc.gw, res.N); err != nil {
		return err
	}
	if res.Pooled, err = sc.settled(ctx, "pooled"); err != nil {
		return err
	}
	res.FillPeak, err = procHWM(sc.pid) // the passes reset it
	logf("scan: filling the pool: peak RSS %s (VmHWM)", mib(res.FillPeak))
	return err
}

// passes sends scanPasses passes of one GET per gateway, each with its peak
// RSS (VmHWM, reset before it) and sampled peak heap.
func (sc *scanner) passes(ctx context.Context) error {
	for pass := range scanPasses {
		if err := resetPeakRSS(sc.pid); err != nil {
			return err
		}
		var sp scanPass
		stopSampling := sampleMax(time.Second, func() (float64, error) { m, err := sc.gw.metrics(ctx); return m[mHeapInuse], err })
		start := time.Now()
		var mu sync.Mutex
		err := parallel(ctx, sc.res.N, scanClients, func(i int) error {
			if err := get(ctx, sc.hub, sc.url(i)); err != nil {
				mu.Lock()
				sp.Errors, sp.FirstErr = sp.Errors+1, cmp.Or(sp.FirstErr, err)
				mu.Unlock()
			}
			return ctx.Err()
		})
		sp.Duration = time.Since(start)
		sp.PeakHeapSample, _ = stopSampling()
		if err == nil {
			sp.PeakRSS, err = procHWM(sc.pid)
		}
		if err == nil {
			sp.End, err = readMem(ctx, sc.gw)
		}
		if err == nil {
			sp.Settled, err = sc.settled(ctx, fmt.Sprintf("pass%d", pass+1))
		}
		if err != nil {
			return err
		}
		logf("scan: pass %d: %s, peak RSS %s, live heap after GC %s, %d errors", pass+1, sp.Duration.Round(100*time.Millisecond), mib(sp.PeakRSS), mib(sp.Settled.Marked), sp.Errors)
		sc.res.Passes = append(sc.res.Passes, sp)
	}
	return nil
}

// idle sends nothing and reads RSS every 10s: the state scanAfter after the
// scan (before and after a forced GC), then until RSS settles (within 2%
// over four later samples) or scanSettleMax has passed; and the gateway's
// CPU from scanAfter on, profiled for its first scanIdleProfile.
func (sc *scanner) idle(ctx context.Context) (err error) {
	res := sc.res
	end := time.Now()
	var idleFrom idleMark
	idleProfile := make(chan error, 1)
	var late []float64 // RSS samples from scanAfter on
	for !res.Stable && res.SettledAt == 0 {
		if err := sleep(ctx, 10*time.Second); err != nil {
			return err
		}
		s, err := readMem(ctx, sc.gw)
		if err != nil {
			return err
		}
		at := time.Since(end)
		res.RSSSamples = append(res.RSSSamples, scanState{memState: s, At: at})
		switch {
		case at < scanAfter:
		case res.After.RSS == 0:
			res.After = s
			if res.AfterGC, err = sc.settled(ctx, "after"); err != nil {
				return err
			}
			if idleFrom, err = markIdle(ctx, sc.gw, sc.pid); err != nil {
				return err
			}
			go func() { idleProfile <- sc.gw.cpuProfile(ctx, scanIdleProfile, filepath.Join(sc.dir, idleProfileName)) }()
		default:
			late = append(late, s.RSS)
			if k := len(late); k >= 4 && slices.Max(late[k-4:])-slices.Min(late[k-4:]) <= 0.02*slices.Max(late[k-4:]) {
				res.Settled, res.SettledAt, res.Stable = s, at, true
			} else if at >= scanSettleMax {
				res.Settled, res.SettledAt = s, at
			}
		}
	}
	idleTo, err := markIdle(ctx, sc.gw, sc.pid)
	if perr := <-idleProfile; perr != nil { // started with idleFrom, before any settling
		logf("scan: idle CPU profile: %v", perr)
	}
	res.Idle = idleFrom.until(idleTo)
	return err
}

// readProfiles reads the tops of the scan's heap and idle CPU profiles.
func (sc *scanner) readProfiles(ctx context.Context, goBin string) {
	prof := func(s string) string { return filepath.Join(sc.dir, "gateway-heap-scan-"+s+".pprof") }
	res := sc.res
	res.HeapStored = heapDiffTop(ctx, goBin, prof("stored"), prof("before"))
	res.HeapPooled = heapDiffTop(ctx, goBin, prof("pooled"), prof("stored"))
	res.HeapAfter = heapDiffTop(ctx, goBin, prof("after"), prof("pooled"))
	path := filepath.Join(sc.dir, idleProfileName)
	if top, err := pprofTop(ctx, goBin, "-nodecount="+strconv.Itoa(topFuncs), path); err == nil {
		res.IdleProfile = &pathProfile{Path: path, Top: top}
	} else {
		logf("scan: cannot read the idle CPU profile: %v", err)
	}
}

// heapDiffTop is pprof's top of the in-use heap at path less base's; empty
// when pprof fails (the report says so).
func heapDiffTop(ctx context.Context, goBin, path, base string) string {
	out, err := pprofTop(ctx, goBin, "-sample_index=inuse_space", "-nodecount=12", "-diff_base="+base, path)
	if err != nil {
		logf("pprof of %s: %v", path, err)
	}
	return out
}

// waitAllProbed waits until no cluster's health is Unknown (every bench
// cluster answers its probe).
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

// waitProbeRound waits for n more probes: about one more per cluster.
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

// waitMetrics polls the gateway's /metrics every second until done says
// so (or fails), for up to scanWaitMax, and returns how long it waited.
func waitMetrics(ctx context.Context, gw *gatewayAdmin, what string, done func(map[string]float64) (bool, error)) (time.Duration, error) {
	return poll(ctx, time.Second, scanWaitMax, what, func(ctx context.Context) error {
		m, err := gw.metrics(ctx)
		if err != nil {
			return retry{err}
		}
		if ok, err := done(m); err != nil || ok {
			return err
		}
		return retry{errors.New("not yet")}
	})
}

// idleCPU is what the gateway spends with nobody sending it a request.
type idleCPU struct {
	Window       time.Duration
	Cores        float64 // CPU time over the window
	ProbesPerSec float64 // cluster_gateway_health_probes_total's rate
}

// PerProbe is the CPU of one probe.
func (i idleCPU) PerProbe() time.Duration {
	return time.Duration(i.Cores / i.ProbesPerSec * float64(time.Second))
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

// settleSamples is how many forced GCs, a second apart, medianAfterGC takes.
const settleSamples = 5

// medianAfterGC reads the gateway's memory after settleSamples forced GCs a
// second apart and returns the sample of median marked heap, its heap
// profile saved at save: the prober's transient entries in flight at one GC
// move a single sample by megabytes.
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
			if err := sleep(ctx, time.Second); err != nil {
				return memState{}, err
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

// The table and figures of section 5 (report.md.tmpl).

// Live heap and RSS per pooled cluster; live heap per stored gateway.
func (s *scanResult) PerEntryHeap() float64  { return s.perEntry(s.Pooled.Marked - s.Stored.Marked) }
func (s *scanResult) PerEntryRSS() float64   { return s.perEntry(s.Pooled.RSS - s.Stored.RSS) }
func (s *scanResult) PerStoredHeap() float64 { return (s.Stored.Marked - s.Base.Marked) / float64(s.N) }

func (s *scanResult) perEntry(v float64) float64 {
	if s.PooledN == 0 {
		return 0
	}
	return v / float64(s.PooledN)
}

// CreatingPeak is the most RSS seen while the gateways were created.
func (s *scanResult) CreatingPeak() float64 { return max(s.CreatePeak, s.CreateSampled) }

// PeakRSS is the highest VmHWM from the gateway's start to the last pass:
// the most of each phase's own.
func (s *scanResult) PeakRSS() float64 {
	peak := max(s.StartPeak, s.CreatePeak, s.StoredPeak, s.FillPeak)
	for _, p := range s.Passes {
		peak = max(peak, p.PeakRSS)
	}
	return peak
}

func (s *scanResult) OverGoal() bool { return s.PeakRSS() > scanPeakRSSGoal }

// The most heap in use sampled during a pass, and live heap right after one.
func (s *scanResult) PeakHeap() (peak float64) {
	for _, p := range s.Passes {
		peak = max(peak, p.PeakHeapSample)
	}
	return peak
}

func (s *scanResult) PeakLive() (live float64) {
	for _, p := range s.Passes {
		live = max(live, p.Settled.Marked)
	}
	return live
}

func (s *scanResult) FirstErr() *scanPass {
	for i := range s.Passes {
		if s.Passes[i].FirstErr != nil {
			return &s.Passes[i]
		}
	}
	return nil
}

// shareRatio is g's live heap above the stored row over the pool's share
// (entries × size per entry); 0 when nothing is pooled.
func (s *scanResult) shareRatio(g memState) float64 {
	if share := s.PerEntryHeap() * g.Entries; share > 0 {
		return (g.Marked - s.Stored.Marked) / share
	}
	return 0
}

// ShareRatios are shareRatio right after each pass.
func (s *scanResult) ShareRatios() []string {
	var rs []string
	for _, p := range s.Passes {
		rs = append(rs, fmt.Sprintf("%.2f×", s.shareRatio(p.Settled)))
	}
	return rs
}

// Estimate is the sizing guidance's RSS: a fresh gateway's plus the pool's
// and the store's live heap doubled (GOGC=100).
func (s *scanResult) Estimate(capacity, gateways int) float64 {
	return s.Base.RSS + 2*(float64(capacity)*s.PerEntryHeap()+float64(gateways)*s.PerStoredHeap())
}

func (s *scanResult) HeapTops() []struct{ What, Top string } {
	return []struct{ What, Top string }{
		{fmt.Sprintf("the %d stored ClusterGateways (stored profile less the fresh gateway's)", s.N), s.HeapStored},
		{fmt.Sprintf("the %d pooled clusters (pooled profile less the stored one)", s.PooledN), s.HeapPooled},
		{fmt.Sprintf("what the passes left above the %d pooled row, %s after the scan (that profile less the pooled one: the pool's entries replaced by others, and what else the passes filled)", s.PooledN, scanAfter), s.HeapAfter},
	}
}

func (s *scanResult) SampleEvery() time.Duration  { return createSampleEvery }
func (s *scanResult) Oversize() int               { return s.N / s.Capacity }
func (s *scanResult) AfterDelay() time.Duration   { return scanAfter }
func (s *scanResult) IdleProfiled() time.Duration { return scanIdleProfile }
func (s *scanResult) IdleProfilePath() string {
	if s.IdleProfile != nil {
		return s.IdleProfile.Path
	}
	return idleProfileName
}
