package main

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/report-*.md from the report writer")

// The whole report, rendered from fixed measurements, is the golden file:
// every section, table and sentence of it, for a run of every section
// (full), one with failures and without konnectivity (partial), and one
// that measured nothing (empty). A change to the report shows as a diff of
// its Markdown.
func TestReportGolden(t *testing.T) {
	args := os.Args
	os.Args = []string{"bench", "-go", "go", "-bin", "_output/bin", "-state-dir", "_output/bench", "-out", "docs/performance.md"}
	defer func() { os.Args = args }()
	for name, r := range map[string]*report{"full": fixtureFull(), "partial": fixturePartial(), "empty": {Opts: options{Concurrency: 8, Rounds: 2, BenchCount: 5}}} {
		got, err := r.markdown()
		if err != nil {
			t.Fatalf("the %s report: %v", name, err)
		}
		checkGolden(t, "the "+name+" report", filepath.Join("testdata", "report-"+name+".md"), got)
	}
}

// checkGolden compares got with the golden file at path, or rewrites it
// with -update.
func checkGolden(t *testing.T, what, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s (go test -run %s -update rewrites it; review the diff):\n%s", what, path, t.Name(), firstDiff(got, string(want)))
	}
}

// firstDiff is the first line where a and b differ, with its number.
func firstDiff(a, b string) string {
	la, lb := splitLines(a), splitLines(b)
	for i := range max(len(la), len(lb)) {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x != y {
			return "line " + itoa(i+1) + ":\n got: " + x + "\nwant: " + y
		}
	}
	return ""
}

func splitLines(s string) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != '\n' {
			i++
		}
		out = append(out, s[:i])
		if i < len(s) {
			i++
		}
		s = s[i:]
	}
	return out
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

const (
	ms  = time.Millisecond
	µs  = time.Microsecond
	miB = 1 << 20
)

// lats are 100 latencies from lo to hi, sorted.
func lats(lo, hi time.Duration) []time.Duration {
	out := make([]time.Duration, 100)
	for i := range out {
		out[i] = lo + (hi-lo)*time.Duration(i)/99
	}
	return out
}

// fixtureLoad is a finished load: n requests in 10s over two rounds, with
// each role's CPU per request.
func fixtureLoad(key, name, via, upstream string, n int, perReq map[string]time.Duration) *target {
	cpu := map[string]time.Duration{}
	for role, c := range perReq {
		cpu[role] = c * time.Duration(n)
	}
	t := &target{Key: key, Name: name, Via: via, Upstream: upstream, Res: loadResult{
		Requests: n, Elapsed: 10 * time.Second, Lat: lats(2*ms+time.Duration(n)*µs, 20*ms+time.Duration(n)*µs), CPU: cpu,
		Before: gwState{RSS: 90 * miB, Goroutines: 139}, After: gwState{RSS: 95 * miB, Goroutines: 140},
		DMallocs: 187 * float64(n), DAllocBytes: 19747 * float64(n),
		RoundRPS: []float64{float64(n)/10 + 20, float64(n)/10 - 20},
	}}
	if gatewayLoads[key] {
		t.Res.Authz = authzDelta{HubSARs: 16, Delegated: 16}
		t.Res.Steady = authzSteady{Requests: n / 4, Window: 3 * time.Second, Filled: 8}
	}
	return t
}

func fixtureTargets(konn bool) []*target {
	cpu := func(gw, hub, up, bare time.Duration) map[string]time.Duration {
		return map[string]time.Duration{"gateway": gw, "hub": hub, "managed-1": up, "managed-3": up, "proxy-server": 2 * µs, "proxy-agent": 1 * µs, "bare-proxy": bare, "bench": 180 * µs}
	}
	ts := []*target{
		fixtureLoad("direct", "direct → managed-1", "client → kube-apiserver", "managed-1", 15430, cpu(3*µs, 15*µs, 717*µs, 0)),
		fixtureLoad("bare", "bare reverse proxy → managed-1", "client → httputil.ReverseProxy", "managed-1", 10734, cpu(6*µs, 23*µs, 818*µs, 351*µs)),
		fixtureLoad("gateway", "gateway port → cluster-1 (Direct)", "client → gateway :port", "managed-1", 9480, cpu(476*µs, 27*µs, 878*µs, 0)),
		fixtureLoad("hub", "hub → gateway → cluster-1", "client → hub → gateway", "managed-1", 5804, cpu(624*µs, 889*µs, 1050*µs, 0)),
		fixtureLoad("hub-bare", "hub → bare reverse proxy → managed-1", "client → hub → bare", "managed-1", 5973, cpu(12*µs, 867*µs, 1070*µs, 479*µs)),
	}
	if konn {
		k := cpu(602*µs, 35*µs, 1020*µs, 0)
		k["proxy-server"], k["proxy-agent"] = 400*µs, 198*µs
		bk := cpu(8*µs, 38*µs, 1070*µs, 524*µs)
		bk["proxy-server"], bk["proxy-agent"] = 420*µs, 220*µs
		ts = append(ts,
			fixtureLoad("konn", "gateway port → cluster-3 (Konnectivity)", "client → gateway :port → tunnel", "managed-3", 6374, k),
			fixtureLoad("direct3", "direct → managed-3", "client → kube-apiserver (baseline)", "managed-3", 15527, cpu(4*µs, 12*µs, 714*µs, 0)),
			fixtureLoad("bare-konn", "bare reverse proxy → managed-3 (Konnectivity)", "client → bare → tunnel", "managed-3", 6237, bk),
		)
	} else {
		ts = append(ts, &target{Key: "konn", Name: "gateway port → Konnectivity cluster", TODO: "TODO: not measured"})
	}
	for _, key := range []string{"direct", "bare", "gateway"} {
		many := *ts[map[string]int{"direct": 0, "bare": 1, "gateway": 2}[key]]
		many.Key, many.Name, many.Workers = key+"-many", many.Name+", 64 workers", 64
		many.Res.Requests = many.Res.Requests * 3 / 2
		ts = append(ts, &many)
	}
	return ts
}

func fixtureMem(heap, marked, rss, goroutines, entries float64) memState {
	return memState{Live: marked * 1.1 * miB, Marked: marked * miB, RSSFile: 65 * miB,
		gwState: gwState{RSS: rss * miB, Heap: heap * miB, Goroutines: goroutines, Entries: entries, OpenConns: entries}}
}

func fixtureStreams(konn bool) *streamsResult {
	path := func(key, name, via, upstream string, rates [4]float64, cpu map[string]time.Duration) *streamPath {
		p := &streamPath{Key: key, Name: name, Via: via, Upstream: upstream, res: map[string]*streamResult{}}
		for i, k := range streamKinds {
			p.res[k.Key] = &streamResult{Units: rates[i] * 6, Elapsed: 6 * time.Second, Rounds: []float64{rates[i] * 1.1, rates[i] * 0.9, rates[i]}, CPU: cpu}
		}
		return p
	}
	roles := func(gw, bare, ps time.Duration) map[string]time.Duration {
		return map[string]time.Duration{"gateway": gw, "bare-proxy": bare, "hub": 100 * ms, "managed-1": 2 * time.Second, "managed-3": 2 * time.Second, "proxy-server": ps, "proxy-agent": ps / 2, "bench": 2 * time.Second}
	}
	s := &streamsResult{Protocol: "websocket", Rounds: 3, Time: 2 * time.Second, Paths: []*streamPath{
		path("direct", "direct → managed-1", "client → kube-apiserver → fake kubelet", "managed-1", [4]float64{154.4, 149.5, 91.5, 57471}, roles(10*ms, 0, 10*ms)),
		path("bare", "bare reverse proxy → managed-1", "client → httputil.ReverseProxy", "managed-1", [4]float64{108.6, 101, 92.2, 50600}, roles(10*ms, 1300*ms, 10*ms)),
		path("gateway", "gateway port → cluster-1 (Direct)", "client → gateway :port", "managed-1", [4]float64{112.1, 103.4, 95.9, 48655}, roles(1250*ms, 0, 10*ms)),
		path("hub", "hub → gateway → cluster-1", "client → hub → gateway", "managed-1", [4]float64{84, 79.5, 82.2, 44642}, roles(1100*ms, 0, 20*ms)),
	}}
	if konn {
		s.Paths = append(s.Paths,
			path("direct3", "direct → managed-3", "client → kube-apiserver", "managed-3", [4]float64{133.6, 142.1, 103.9, 56933}, roles(10*ms, 0, 10*ms)),
			path("bare-konn", "bare reverse proxy → managed-3 (Konnectivity)", "client → bare → tunnel", "managed-3", [4]float64{32.8, 35.5, 37.1, 43789}, roles(10*ms, 1100*ms, 2400*ms)),
			path("konn", "gateway port → cluster-3 (Konnectivity)", "client → gateway → tunnel", "managed-3", [4]float64{33.8, 36, 37.4, 43494}, roles(1200*ms, 0, 2400*ms)),
			path("hub-konn", "hub → gateway → cluster-3 (Konnectivity)", "client → hub → gateway → tunnel", "managed-3", [4]float64{30.7, 32.9, 35.4, 43292}, roles(1150*ms, 0, 2300*ms)),
		)
	}
	top := "Duration: 2s, Total samples = 810ms (40.44%)\n      flat  flat%   sum%        cum   cum%\n     510ms 62.96% 62.96%      510ms 62.96%  internal/runtime/syscall/linux.Syscall6\n      70ms  8.64% 71.60%       70ms  8.64%  crypto/internal/fips140/aes/gcm.gcmAesDec"
	s.Profiles = []pathProfile{
		{Key: "pf1", What: "during port-forward, 1 connection over the gateway port (Direct)", Path: "_output/bench/gateway-streams-pf1.pprof", Top: top},
		{Key: "exec", What: "during exec over the gateway port (Direct)", Path: "_output/bench/gateway-streams-exec.pprof", Top: top},
		{Key: "logs", What: "during `logs -f` over the gateway port (Direct)", Path: "_output/bench/gateway-streams-logs.pprof"},
	}
	return s
}

func fixtureIsolation(limited float64) *isolationResult {
	phase := func(p99 time.Duration, tooMany int, noisy bool) isoPhase {
		ph := isoPhase{
			Steady:   steadyResult{Sent: 2000, OK: 2000 - tooMany, TooMany: tooMany, Lat: lats(2*ms, p99)},
			Control:  steadyResult{Sent: 2000, OK: 2000, Lat: lats(2*ms, p99*9/10)},
			RoundP99: []time.Duration{p99, p99 * 11 / 10}, ControlP99: []time.Duration{p99 * 9 / 10, p99},
			GatewayCPU: 800 * ms, Elapsed: 8 * time.Second,
			CPU: map[string]time.Duration{"machine": 12 * time.Second, "gateway": 800 * ms, "bench": 2 * time.Second, "hub": 300 * ms, "etcd": 100 * ms, "managed-1": 900 * ms, "managed-2": 700 * ms},
		}
		if noisy {
			ph.NoisyOK, ph.Noisy429, ph.FairFull, ph.Global429, ph.InFlight, ph.Queued = 640, 1666, 1664*limited, 845*(1-limited), 16*limited, 32*limited
			ph.CPU["neighbour"] = 1500 * ms
			ph.GatewayCPU = 1200 * ms
		}
		return ph
	}
	return &isolationResult{
		Opts:   isolationOptions{Delay: time.Second, Noisy: 200, NoisyUsers: 8, Rate: 50, Phase: 4 * time.Second, Warm: 2 * time.Second, InFlight: 150, Rounds: 2},
		Rounds: 2, SlowCluster: "slow", Steady: "cluster-1", SlowUpstream: "managed-2", Through: "http://127.0.0.1:4000", SteadyUpstream: "managed-1",
		DelayedChunks: 1234,
		Defaults:      map[string]string{"max-requests-per-cluster": "16", "max-queued-per-cluster": "32", "queue-wait-timeout": "10s"},
		Configs: []*isoConfig{
			{Name: "per-cluster limits (defaults)", Alone: phase(13*ms, 0, false), Noisy: phase(time.Duration(13+30*(1-limited))*ms, 0, true)},
			{Name: "per-cluster limits off", Alone: phase(13*ms, 0, false), Noisy: phase(21*ms, 845, true)},
		},
	}
}

func fixtureScan(stable bool, errs int) *scanResult {
	passes := make([]scanPass, 3)
	for i := range passes {
		passes[i] = scanPass{Duration: 40*time.Second + time.Duration(i)*time.Second, PeakRSS: float64(290+5*i) * miB, PeakHeapSample: float64(200+i) * miB,
			End: fixtureMem(160, 95, 285, 1143, 1000), Settled: fixtureMem(160, 94+float64(i), 284, 1143, 1000), Errors: errs}
		if errs > 0 {
			passes[i].FirstErr = errors.New("GET bench-0042: 503")
		}
	}
	top := "Showing nodes accounting for 46.60MB, 437.12% of 10.66MB total\n      flat  flat%   sum%        cum   cum%\n   13.51MB 126.71% 126.71%    15.51MB 145.47%  k8s.io/api/core/v1.(*Secret).Unmarshal"
	return &scanResult{
		N: 10000, Capacity: 1000, Clients: 16, GatewayBin: "_output/bin/cluster-gateway",
		CreateTime: 30 * time.Second, ProbedWait: 11 * time.Second, PooledProbedWait: 20 * time.Second,
		Base: fixtureMem(13, 7.7, 84, 132, 0), Stored: fixtureMem(77, 53.2, 186, 148, 0), Pooled: fixtureMem(137, 92.9, 266, 1149, 1000), PooledN: 1000,
		Passes: passes, After: fixtureMem(188, 96.5, 284.8, 1143, 1000), AfterGC: fixtureMem(164, 97.7, 284.2, 1145, 1000),
		Settled: fixtureMem(170, 94, 287, 1144, 1000), SettledAt: 107 * time.Second, Stable: stable, StartPeak: 96.4 * miB, StoredPeak: 201.7 * miB, FillPeak: 275.2 * miB,
		CreatePeak: 340 * miB, CreateSampled: 338.5 * miB, CreateSamples: 2050, CreateWindow: 41 * time.Second,
		Idle:        idleCPU{Window: 40 * time.Second, Cores: 0.76, ProbesPerSec: 486},
		IdleProfile: &pathProfile{Path: "_output/bench/gateway-cpu-idle.pprof", Top: top},
		HeapStored:  top, HeapPooled: top,
	}
}

func fixtureGoBench() *goBench {
	gb := &goBench{Command: "go test -c ./pkg/proxy/ ./pkg/pool/; then ...", Samples: map[string][]benchSample{}}
	for _, b := range []struct {
		name           string
		ns, bop, alloc float64
	}{
		{"BenchmarkDirect/get", 46100, 8325, 78}, {"BenchmarkDirect/list", 140000, 24333, 101},
		{"BenchmarkBareReverseProxy/get", 111300, 49806, 165}, {"BenchmarkBareReverseProxy/list", 261400, 82099, 206},
		{"BenchmarkProxyGateway/get", 94900, 19937, 181}, {"BenchmarkProxyGateway/list", 245000, 52414, 228},
		{"BenchmarkServePieces/store-get", 117, 32, 1}, {"BenchmarkAcquireRelease", 238, 0, 0},
	} {
		gb.Order = append(gb.Order, b.name)
		for _, f := range []float64{0.95, 1, 1.2} {
			gb.Samples[b.name] = append(gb.Samples[b.name], benchSample{NsOp: b.ns * f, BOp: b.bop, AllocsOp: b.alloc})
		}
	}
	return gb
}

func fixtureAB() *abResultSet {
	row := func(key, what string, hub, port time.Duration) *abRow {
		res := func(cpu time.Duration) *loadResult {
			return &loadResult{Requests: 1000, CPU: map[string]time.Duration{"gateway": 1000 * cpu, "hub": 1000 * 780 * µs}, Lat: lats(5*ms, 30*ms)}
		}
		return &abRow{Variant: abVariant{Key: key, What: what}, Res: map[string]*loadResult{"hub": res(hub), "port": res(port)}, RSSStart: 80 * miB, RSSLoad: 88 * miB, RSSIdle: 87 * miB}
	}
	return &abResultSet{Conc: 8, Per: 3 * time.Second, Round: 4, Rows: []*abRow{
		row("baseline", "the defaults", 507*µs, 365*µs),
		row("stock-chain", "k8s.io/apiserver's DefaultBuildHandlerChain wrapped around the proxy route, instead of the copy", 523*µs, 425*µs),
		row("stock-path", "the whole stock path", 560*µs, 470*µs),
		row("no-certauth", "the certificate cache off", 584*µs, 475*µs),
	}}
}

func fixtureFull() *report {
	top := "Duration: 5s, Total samples = 1780ms (35.59%)\n      flat  flat%   sum%        cum   cum%\n     190ms 10.67% 10.67%      190ms 10.67%  internal/runtime/syscall/linux.Syscall6"
	r := &report{
		Machine: machine{CPUs: 2, Model: "AMD EPYC", MemGiB: 23.5, Go: "go version go1.26.8 linux/amd64", Kernel: "6.18", Started: time.Date(2026, 12, 4, 22, 27, 0, 0, time.UTC)},
		Opts:    options{StateDir: "_output/bench", Concurrency: 8, Rounds: 2, Duration: 10 * time.Second, Warm: time.Second, BenchCount: 5},
		GoBench: fixtureGoBench(), Targets: fixtureTargets(true),
		Pooled: &pooledResult{N: 1000, Base: fixtureMem(16, 8.5, 88.5, 139, 2), Stored: fixtureMem(22.5, 12.7, 99.9, 139, 2), Pooled: fixtureMem(65.5, 45.2, 149.5, 1139, 1002),
			Deleted: fixtureMem(19.7, 9.4, 135.3, 140, 2), Released: fixtureMem(19.6, 9.4, 95.5, 139, 2),
			CreateTime: 3 * time.Second, RequestTime: 3200 * ms, DeleteTime: 2300 * ms, ReleaseTime: 5 * time.Second},
		Isolation:  fixtureIsolation(1),
		AB:         fixtureAB(),
		Scan:       fixtureScan(true, 0),
		Streams:    fixtureStreams(true),
		EnvStartup: 12 * time.Second, Capacity: 1100, Total: 23*time.Minute + 38*time.Second,
		Profiles: []pathProfile{
			{Key: "gateway", What: "on its own port (Direct cluster)", Path: "_output/bench/gateway-cpu.pprof", Top: top},
			{Key: "hub", What: "behind the hub (front-proxy authentication)", Path: "_output/bench/gateway-cpu-hub.pprof"},
		},
		GatewayArgs: []string{"--pool-capacity=1100", "--max-requests-per-cluster=64", "--authorization-webhook-cache-authorized-ttl=20s"},
		AuthzIdle:   &authzSteady{Window: 12 * time.Second},
		Watches: &watchesResult{N: 10000, Users: 20, Clusters: 2, GatewayArgs: []string{"--pool-capacity=1100", "--max-streams-per-cluster=5000", "--max-streams-per-user-per-cluster=5000"},
			HeapTop: "Showing nodes accounting for 172.69MB\n   68.53MB 781.81% 781.81%    68.53MB 781.81%  pkg/proxy.New.newWatchCopyBuffers.func2",
			Holders: []*watchResult{
				{Key: "gateway", Name: "gateway port", Watches: 10000, Before: memSample{RSS: 83.3 * miB, Heap: 10 * miB, Stacks: 1 * miB, Goroutines: 140}, After: memSample{RSS: 562.2 * miB, Heap: 299 * miB, Stacks: 198 * miB, Goroutines: 20240}, Open: 10949 * ms, Deliver: 1382 * ms},
				{Key: "bare", Name: "bare reverse proxies (one per cluster, 2 processes)", Watches: 10000, Before: memSample{RSS: 70.7 * miB, Heap: 5 * miB, Stacks: 1 * miB, Goroutines: 20}, After: memSample{RSS: 447.9 * miB, Heap: 451 * miB, Stacks: 199 * miB, Goroutines: 20220}, Open: 8546 * ms, Deliver: 991 * ms},
			}},
	}
	return r
}

// fixturePartial is a run without konnectivity, with failures: a load's
// error, a failed stream, SPDY, a pool that kept its entries after
// deletion, a scan whose RSS did not settle, missed isolation and
// dials during the loads.
func fixturePartial() *report {
	r := fixtureFull()
	r.GoBench, r.Profiles, r.AuthzIdle, r.Watches = nil, nil, nil, nil
	r.Targets = fixtureTargets(false)
	r.Targets[1].Res.FirstErr = errors.New("GET: connection reset")
	r.Targets[1].Res.Errors = 3
	for _, t := range r.Targets {
		if t.Key == "gateway" || t.Key == "gateway-many" {
			t.Res.DDials, t.Res.DCreations = 4, 2
		}
		if t.Key == "gateway-many" {
			t.Res.Requests = t.Res.Requests / 2
		}
	}
	r.Pooled.Deleted.Marked = 30 * miB
	r.Scan = fixtureScan(false, 2)
	r.Scan.IdleProfile, r.Scan.HeapAfter = nil, ""
	r.Streams = fixtureStreams(true)
	r.Streams.Protocol = "spdy"
	r.Streams.path("konn").res["exec"].Units /= 2
	r.Streams.path("hub").res["pf8"].Err = errors.New("upgrade refused")
	r.Isolation = fixtureIsolation(0)
	r.AB.Rows = r.AB.Rows[:2]
	r.Scan.CreatePeak, r.Scan.CreateSampled = 0, 0 // a scan that did not measure its creating
	return r
}

// fixtureSection is the report of -only name: the full run's measurements
// of that section alone, as runEnv leaves them (no Go benchmarks).
func fixtureSection(name string) *report {
	f := fixtureFull()
	r := &report{Machine: f.Machine, Opts: f.Opts, EnvStartup: f.EnvStartup, Capacity: f.Capacity, Total: f.Total}
	r.Opts.Only, r.Opts.SkipGoBench = name, true
	switch name {
	case "loads":
		r.Targets, r.Profiles, r.GatewayArgs, r.AuthzIdle = f.Targets, f.Profiles, f.GatewayArgs, f.AuthzIdle
	case "ab":
		r.AB = f.AB
	case "isolation":
		r.Isolation = f.Isolation
	case "streams":
		r.Streams = f.Streams
	case "watches":
		r.Watches = f.Watches
	case "fanout":
		r.Fanout = fixtureFanout(24*miB, 12*time.Second, 300*ms)
		r.Fanout.Watches, r.Fanout.FDs, r.Fanout.NoFile = fixtureWatches(40<<10, 5<<10), [][2]int{{1100, 1050}, {10100, 10050}}, 1<<20
		r.Fanout.Profile, r.Fanout.SetupTime = f.Profiles[0].withPath("_output/bench/gateway-cpu-fanout.pprof"), 95*time.Second
	case "scan":
		r.Scan = f.Scan
	}
	return r
}

// Each section's report alone (-only), rendered from fixed measurements, is
// a golden file too: testdata/section-<name>.md. The full report has no
// fan-out; this is where its section is held.
func TestSectionReportsGolden(t *testing.T) {
	args := os.Args
	defer func() { os.Args = args }()
	for _, name := range sectionOrder {
		os.Args = []string{"bench", "-go", "go", "-bin", "_output/bin", "-state-dir", "_output/bench", "-only", name}
		got, err := fixtureSection(name).markdown()
		if err != nil {
			t.Fatalf("the %s section's report: %v", name, err)
		}
		checkGolden(t, "the "+name+" section's report", filepath.Join("testdata", "section-"+name+".md"), got)
	}
}

func (p pathProfile) withPath(path string) *pathProfile { p.Path = path; return &p }
