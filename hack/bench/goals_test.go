package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

// load is a finished load of key: requests over elapsed, and each role's CPU.
func load(key string, requests int, elapsed time.Duration, cpu map[string]time.Duration) *target {
	return &target{Key: key, Res: loadResult{Requests: requests, Elapsed: elapsed, CPU: cpu}}
}

func goalNamed(t *testing.T, gs []goal, prefix string) goal {
	t.Helper()
	for _, g := range gs {
		if strings.HasPrefix(g.Goal, prefix) {
			return g
		}
	}
	t.Fatalf("no goal %q", prefix)
	return goal{}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// mustRender is the report's template name executed with data.
func mustRender(t *testing.T, name string, data any) string {
	t.Helper()
	out, err := render(name, data)
	if err != nil {
		t.Fatalf("template %s: %v", name, err)
	}
	return out
}

// Each CPU and throughput goal is the ratio its goal states, from the
// loads of one run: the bare proxy's CPU is its own process's in its row,
// not the bench process's (the clients'); the in-process goals compare
// medians. A value exactly at the bound meets it.
func TestGoalsFromOneRun(t *testing.T) {
	ms := time.Millisecond
	r := &report{
		Opts: options{Concurrency: 8},
		Targets: []*target{
			load("direct", 1000, time.Second, map[string]time.Duration{"bench": 100 * ms}),                       // client: 100 µs per request
			load("bare", 1000, time.Second, map[string]time.Duration{"bench": 100 * ms, "bare-proxy": 200 * ms}), // bare proxy: 200 µs
			load("gateway", 900, time.Second, map[string]time.Duration{"gateway": 270 * ms}),                     // 300 µs per request, 900 req/s
			load("hub", 500, time.Second, map[string]time.Duration{"gateway": 200 * ms, "hub": 400 * ms}),        // 400 µs vs 800 µs
			load("konn", 500, time.Second, map[string]time.Duration{"gateway": 180 * ms}),                        // 360 µs
		},
		GoBench: &goBench{Samples: map[string][]benchSample{
			"BenchmarkProxyGateway/get":      {{NsOp: 90, AllocsOp: 185}, {NsOp: 110, AllocsOp: 185}, {NsOp: 100, AllocsOp: 185}},
			"BenchmarkBareReverseProxy/get":  {{NsOp: 100, AllocsOp: 165}},
			"BenchmarkProxyGateway/list":     {{NsOp: 200, AllocsOp: 230}},
			"BenchmarkBareReverseProxy/list": {{NsOp: 100, AllocsOp: 206}},
		}},
	}
	gs := r.Goals()
	for _, c := range []struct {
		prefix string
		value  float64
		met    bool
	}{
		{"Gateway port, Direct, 8 workers: req/s", 0.9, true},
		{"Gateway port, Direct, 8 workers: gateway CPU", 1.5, true},
		{"Through the hub", 0.5, true},
		{"Konnectivity", 1.2, false},
		{"In process (`get`): handler ns/op", 1.0, true},
		{"In process (`get`): handler allocs/op", 20, true},
		{"In process (`list`): handler ns/op", 2.0, false},
		{"In process (`list`): handler allocs/op", 24, false},
	} {
		g := goalNamed(t, gs, c.prefix)
		if g.Missing != "" || !near(g.Value, c.value) || g.met() != c.met {
			t.Errorf("%s: value %v met %v (missing %q), want %v met %v", c.prefix, g.Value, g.met(), g.Missing, c.value, c.met)
		}
	}
}

// The Konnectivity goal's baseline is the bare proxy over the same tunnel,
// its own process's CPU in its row (where "bare-proxy" is that process)
// against the bare proxy's direct row, in the goal; the ratios compare the
// gateway's CPU per request over Konnectivity with its Direct one.
func TestKonnectivityBaselineIsTheBareProxyOverTheTunnel(t *testing.T) {
	ms := time.Millisecond
	r := &report{
		Opts: options{Concurrency: 8},
		Targets: []*target{
			load("bare", 1000, time.Second, map[string]time.Duration{"bench": 100 * ms, "bare-proxy": 200 * ms}), // 200 µs
			load("gateway", 1000, time.Second, map[string]time.Duration{"gateway": 300 * ms}),                    // 300 µs
			load("konn", 500, time.Second, map[string]time.Duration{"gateway": 180 * ms}),                        // 360 µs: 1.2×, 60 µs more
			load("bare-konn", 500, time.Second, map[string]time.Duration{"bare-proxy": 125 * ms}),                // 250 µs: 1.25×, 50 µs more
		},
	}
	gs := r.Goals()
	if g := goalNamed(t, gs, "Konnectivity"); !near(g.Value, 1.2) || !strings.Contains(g.Measured, "the bare proxy over the same tunnel: 1.25× (250 µs vs 200 µs)") {
		t.Errorf("the Konnectivity goal is %v, %q: want 1.2 with its baseline", g.Value, g.Measured)
	}
	if out := mustRender(t, "ratios", r); !strings.Contains(out, "gateway CPU/req 360 µs vs 300 µs") {
		t.Errorf("the ratios lack %q:\n%s", "gateway CPU/req 360 µs vs 300 µs", out)
	}
}

// The hub goal's baseline is the bare proxy behind the same hub: its own
// process's CPU in the hub-bare row against the hub's in that row, in the
// goal; the ratios give the hub's own CPU per request.
func TestHubBaselineIsTheBareProxyBehindTheHub(t *testing.T) {
	ms := time.Millisecond
	r := &report{
		Opts: options{Concurrency: 8},
		Targets: []*target{
			load("gateway", 1000, time.Second, map[string]time.Duration{"gateway": 300 * ms}),
			load("hub", 500, time.Second, map[string]time.Duration{"gateway": 300 * ms, "hub": 500 * ms}),         // 600 µs vs 1 ms: 0.6×
			load("hub-bare", 500, time.Second, map[string]time.Duration{"bare-proxy": 225 * ms, "hub": 450 * ms}), // 450 µs vs 900 µs: 0.5×
		},
	}
	gs := r.Goals()
	if g := goalNamed(t, gs, "Through the hub"); !near(g.Value, 0.6) || !strings.Contains(g.Measured, "the bare proxy behind the same hub: 0.50× (450 µs vs 900 µs)") {
		t.Errorf("the hub goal is %v, %q: want 0.6 with its baseline", g.Value, g.Measured)
	}
	if want, out := "req/s 0.50×, p50 0 µs vs 0 µs; the hub spends 1.00 ms CPU per request", mustRender(t, "ratios", r); !strings.Contains(out, want) {
		t.Errorf("the ratios lack %q:\n%s", want, out)
	}
}

// The bare proxy behind the hub passes .../clustergateways/NAME/proxy/PATH
// on as PATH, and nothing outside its group.
func TestAggregatedSubpath(t *testing.T) {
	for path, want := range map[string]string{
		bareProxyPrefix + "cluster-1/proxy/api/v1/namespaces/default":                  "/api/v1/namespaces/default",
		bareProxyPrefix + "cluster-1/proxy/":                                           "/",
		bareProxyPrefix + "cluster-1":                                                  "",
		"/apis/gateway.clustergateway.io/v1alpha1/clustergateways/cluster-1/proxy/api": "",
	} {
		got, ok := aggregatedSubpath(path)
		if got != want || ok != (want != "") {
			t.Errorf("aggregatedSubpath(%q) = %q, %v; want %q", path, got, ok, want)
		}
	}
}

// A goal whose loads did not run says so instead of judging a zero.
func TestGoalsWithoutLoadsAreNotMeasured(t *testing.T) {
	for _, g := range (&report{}).Goals() {
		if g.Missing == "" || !strings.HasPrefix(g.Verdict(), "not measured") {
			t.Errorf("%s: %q (missing %q), want not measured", g.Goal, g.Verdict(), g.Missing)
		}
	}
}

// The scan's goals: creating the gateways is judged on the most RSS seen
// while they were created (VmHWM or a sample); peak RSS is the highest
// VmHWM, filling included; the live heap after eviction is judged against
// the entries it holds times the live heap each pooled entry added; RSS one
// minute after against the settled figure, and only when RSS settled.
func TestScanGoals(t *testing.T) {
	const mb = 1 << 20
	mem := func(marked, rss, entries float64) memState {
		return memState{Marked: marked * mb, gwState: gwState{RSS: rss * mb, Entries: entries}}
	}
	s := &scanResult{
		PooledN:       1000,
		CreatePeak:    270 * mb,
		CreateSampled: 310 * mb, // a sample above VmHWM counts too
		FillPeak:      250 * mb,
		Passes:        []scanPass{{PeakRSS: 280 * mb}, {PeakRSS: 290 * mb}},
		Stored:        mem(40, 180, 0),
		Pooled:        mem(80, 230, 1000), // 40 MiB for 1000 entries
		AfterGC:       mem(84, 280, 1000), // 44 MiB above the stored row: 1.1×
		After:         mem(90, 276, 1000),
		Settled:       mem(90, 300, 1000),
		Stable:        true,
	}
	gs := (&report{Scan: s}).scanGoals()
	if g := gs[0]; !near(g.Value, 310*mb) || g.met() {
		t.Errorf("peak RSS while creating %v met %v, want 310 MiB (over 300 MB) not met", g.Value/mb, g.met())
	}
	if g := gs[1]; !near(g.Value, 290*mb) || g.met() {
		t.Errorf("peak RSS %v met %v, want 290 MiB (over 300 MB) not met", g.Value/mb, g.met())
	}
	if g := gs[2]; !near(g.Value, 1.1) || !g.met() {
		t.Errorf("live heap after eviction %v× met %v, want 1.1× met", g.Value, g.met())
	}
	if g := gs[3]; !near(g.Value, 0.92) || !g.met() {
		t.Errorf("RSS after over settled %v× met %v, want 0.92× met", g.Value, g.met())
	}
	s.Stable = false
	if g := (&report{Scan: s}).scanGoals()[3]; g.Missing == "" {
		t.Error("RSS that did not settle was judged")
	}
	s.CreatePeak, s.CreateSampled = 0, 0
	if g := (&report{Scan: s}).scanGoals()[0]; g.Missing == "" {
		t.Error("a scan that did not measure its creating was judged on it")
	}
}

// The idle CPU is given per probe (CPUs ÷ probes per second), with the
// profile's path and its top as pprof printed it.
func TestScanIdleCPU(t *testing.T) {
	const mb = 1 << 20
	top := "Duration: 30s, Total samples = 24s (80.00%)\n      flat  flat%   sum%        cum   cum%\n     2.40s 10.00% 10.00%      2.40s 10.00%  runtime.memmove"
	s := &scanResult{
		N: 10000, Capacity: 1000, PooledN: 1000, Stored: memState{Marked: 40 * mb}, Pooled: memState{Marked: 80 * mb},
		Idle:        idleCPU{Window: 40 * time.Second, Cores: 0.8, ProbesPerSec: 400}, // 2 ms per probe
		IdleProfile: &pathProfile{Path: "state/gateway-cpu-idle.pprof", Top: top},
	}
	out := mustRender(t, "scan", s)
	for _, want := range []string{
		"`go tool pprof state/gateway-cpu-idle.pprof`",
		"Per probe: 2.00 ms of CPU.",
		"```\n" + top + "\n```",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the scan section lacks %q:\n%s", want, out)
		}
	}
}
