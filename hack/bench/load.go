package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
	"github.com/clustergateway/cluster-gateway/internal/testfrontend"
)

// Section 2: the same object GET through every path side by side.

var (
	manyWorkers = flag.Int("workers-many", 64, "keep-alive workers of the extra direct, bare and gateway-port loads that show whether one HTTP/2 connection to a cluster limits (0: no such loads)")
	onlyTargets = flag.String("loads", "", "comma-separated loads to run, of "+strings.Join(targetKeys, ",")+" (empty: all)")
)

// targetKeys are the loads buildTargets makes.
var targetKeys = []string{"direct", "bare", "gateway", "hub", "hub-bare", "konn", "direct3", "bare-konn", "direct-many", "bare-many", "gateway-many"}

// benchUser is who the gateway paths' loads authenticate as: a hub user
// outside system:masters (whom the authorizer allows without asking), so
// that each request is authorized as a real user's is.
const benchUser = "cluster-gateway-bench"

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
	asUser         bool           // authenticates as benchUser, whose binding must have reached the hub first

	Res loadResult
}

// loadResult accumulates a target's rounds.
type loadResult struct {
	Requests, Errors int
	FirstErr         error
	Elapsed          time.Duration
	Lat              []time.Duration
	CPU              map[string]time.Duration // role -> CPU used during the loads; "bench" is this process
	Before, After    gwState                  // the gateway before the first and after the last round
	// What the gateway did during the loads: pool entries created, heap
	// objects and bytes allocated, connections dialed, tunnels built.
	DCreations, DMallocs, DAllocBytes, DDials, DTunnels float64
	RoundRPS                                            []float64   // req/s of each round
	Authz                                               authzDelta  // delegated authorization during the loads (sar.go)
	Steady                                              authzSteady // and right after a fresh caller's decision was filled
}

// PerRound is v per round.
func (r *loadResult) PerRound(v float64) float64 { return v / float64(max(1, len(r.RoundRPS))) }

// Per is v per request.
func (r *loadResult) Per(v float64) float64 { return v / float64(max(1, r.Requests)) }

func (r *loadResult) RPS() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}

// Pct is the latency at quantile p of the sorted latencies.
func (r *loadResult) Pct(p float64) time.Duration { return pct(r.Lat, p) }

func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p))]
}

// cpuPerReq is CPU per successful request of one role.
func (r *loadResult) cpuPerReq(role string) (time.Duration, bool) {
	c, ok := r.CPU[role]
	if !ok || r.Requests == 0 {
		return 0, false
	}
	return c / time.Duration(r.Requests), true
}

// PerReq is role's CPU per request, 0 when it was not measured.
func (r *loadResult) PerReq(role string) time.Duration { c, _ := r.cpuPerReq(role); return c }

// envPids are the processes of env whose CPU the loads read, by role.
func envPids(env *localenv.Env) map[string]int {
	pids := map[string]int{"gateway": env.Gateway.Process.Pid(), "hub": env.Hub.Process.Pid(), "managed-1": env.Managed[0].Process.Pid()}
	if k := env.Konnectivity; k != nil {
		pids[k.Cluster.Name], pids["proxy-server"], pids["proxy-agent"] = k.Cluster.Process.Pid(), k.Servers[0].Process.Pid(), k.Agent.Pid()
	}
	return pids
}

// proxyPrefix is the path of c's proxy subresource (hub or gateway port).
func proxyPrefix(c *localenv.Cluster) string {
	return gatewaysPath + c.GatewayName + "/proxy"
}

// gatewaysPath is the ClusterGateways' path, on the hub or the gateway's port.
const gatewaysPath = "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/"

// buildTargets are the paths to the same object, side by side: the gateway
// paths as benchUser, and direct, bare and gateway port again with
// -workers-many workers over the same clients; only the -loads loads. stop
// stops the bare proxies and closes the clients.
func buildTargets(ctx context.Context, env *localenv.Env) (ts []*target, stop func(), err error) {
	b := &targetBuilder{kit: kit{ctx: ctx}, pids: envPids(env)}
	defer func() {
		if err != nil {
			b.stopLogged()
		}
	}()
	user, err := env.NewUser(benchUser)
	if err != nil {
		return nil, nil, err
	}
	for _, role := range []string{"cluster-gateway:proxy-reader", bareRole} {
		if _, err := env.Kubectl(env.Hub.Kubeconfig, "create", "clusterrolebinding", benchUser+":"+role, "--clusterrole="+role, "--user="+benchUser); err != nil {
			return nil, nil, err
		}
	}
	if ts, err = b.targets(env, user); err != nil {
		return nil, nil, err
	}
	for _, t := range ts {
		if t.Pids == nil {
			t.Pids = b.pids
		}
		if t.TODO == "" && t.asUser {
			if err := waitAllowed(ctx, t); err != nil {
				return nil, nil, err
			}
		}
	}
	if n := *manyWorkers; n > 0 {
		for _, t := range ts[:3] { // direct, bare, gateway
			many := *t
			many.Key, many.Name, many.Workers = t.Key+"-many", fmt.Sprintf("%s, %d workers", t.Name, n), n
			ts = append(ts, &many)
		}
	}
	if *onlyTargets != "" {
		keep := strings.Split(*onlyTargets, ",")
		for _, k := range keep {
			if !slices.Contains(targetKeys, k) {
				return nil, nil, fmt.Errorf("-loads: no load %q (have %s)", k, strings.Join(targetKeys, ","))
			}
		}
		ts = slices.DeleteFunc(ts, func(t *target) bool { return !slices.Contains(keep, t.Key) })
	}
	return ts, b.stopLogged, freshCallers(ctx, env, ts)
}

// targetBuilder is the loads' kit, and the processes whose CPU they read.
type targetBuilder struct {
	kit
	pids map[string]int
}

func (b *targetBuilder) stopLogged() {
	if err := b.stop(); err != nil {
		logf("%v", err)
	}
}

// targets are the loads to managed-1, and to the konnectivity cluster when
// the environment has one; the gateway paths' as user.
func (b *targetBuilder) targets(env *localenv.Env, user *localenv.User) ([]*target, error) {
	m1, k := env.Managed[0], env.Konnectivity
	gwClient, hubClient := b.client(env.Gateway.CA.CertPEM, user.Cert), b.client(env.Hub.CA.CertPEM, user.Cert)
	proxyPath := func(c *localenv.Cluster) string { return proxyPrefix(c) + requestPath }
	b1, err := b.bare(m1, nil, false)
	if err != nil {
		return nil, err
	}
	// The paths without a bare proxy of their own show this one's
	// background CPU, as every role not on a path does.
	b.pids["bare-proxy"] = b1.Pid()
	bh, err := b.bare(m1, nil, true)
	if err != nil {
		return nil, err
	}
	if err := registerBareBehindHub(b.ctx, env, bh.URL, bh.CAPEM); err != nil {
		return nil, err
	}
	ts := []*target{
		{Key: "direct", Name: "direct → managed-1", Via: "client → kube-apiserver", URL: m1.URL + requestPath, Client: b.client(m1.CA.CertPEM, m1.GatewayUser), Upstream: "managed-1"},
		{Key: "bare", Name: "bare reverse proxy → managed-1", Via: "client → httputil.ReverseProxy in a process of its own (one shared transport) → kube-apiserver", URL: b1.URL + requestPath, Client: b.client(b1.CAPEM, nil), Upstream: "managed-1", Pids: withBare(b.pids, b1)},
		{Key: "gateway", Name: "gateway port → cluster-1 (Direct)", Via: "client → gateway :port (x509 authn, generic filters) → pooled transport → kube-apiserver", URL: env.Gateway.URL + proxyPath(m1), Client: gwClient, Upstream: "managed-1", asUser: true},
		{Key: "hub", Name: "hub → gateway → cluster-1", Via: "client → hub kube-apiserver (aggregation) → gateway → kube-apiserver", URL: env.Hub.URL + proxyPath(m1), Client: hubClient, Upstream: "managed-1", asUser: true},
		{Key: "hub-bare", Name: "hub → bare reverse proxy → managed-1", Via: "client → hub kube-apiserver (aggregation, an APIService of its own) → httputil.ReverseProxy in a process of its own → kube-apiserver (baseline of the hub goal)", URL: env.Hub.URL + bareProxyPrefix + m1.GatewayName + "/proxy" + requestPath, Client: hubClient, Upstream: "managed-1", Pids: withBare(b.pids, bh), asUser: true},
	}
	if k == nil {
		return append(ts, &target{Key: "konn", Name: "gateway port → Konnectivity cluster", TODO: "TODO: this localenv runs no konnectivity proxy-server/agent (Env.Konnectivity is nil); the row is not measured"}), b.err()
	}
	bk, err := b.bare(k.Cluster, k, false)
	if err != nil {
		return nil, err
	}
	ts = append(ts,
		&target{Key: "konn", Name: "gateway port → " + k.Cluster.GatewayName + " (Konnectivity)", Via: "client → gateway :port → gRPC tunnel → proxy-server → proxy-agent → kube-apiserver", URL: env.Gateway.URL + proxyPath(k.Cluster), Client: gwClient, Upstream: k.Cluster.Name, asUser: true},
		&target{Key: "direct3", Name: "direct → " + k.Cluster.Name, Via: "client → kube-apiserver (baseline of the Konnectivity row)", URL: k.Cluster.URL + requestPath, Client: b.client(k.Cluster.CA.CertPEM, k.Cluster.GatewayUser), Upstream: k.Cluster.Name},
		&target{Key: "bare-konn", Name: "bare reverse proxy → " + k.Cluster.Name + " (Konnectivity)", Via: "client → httputil.ReverseProxy in a process of its own → konnectivity-client's gRPC tunnel → proxy-server → proxy-agent → kube-apiserver (baseline of the Konnectivity goal)", URL: bk.URL + requestPath, Client: b.client(bk.CAPEM, nil), Upstream: k.Cluster.Name, Pids: withBare(b.pids, bk)},
	)
	return ts, b.err()
}

// withBare is pids with "bare-proxy" the bare proxy b that serves the path.
func withBare(pids map[string]int, b *bareProxy) map[string]int {
	out := maps.Clone(pids)
	out["bare-proxy"] = b.Pid()
	return out
}

// waitAllowed waits until benchUser's binding has reached the hub's
// authorizer and t answers.
func waitAllowed(ctx context.Context, t *target) error {
	_, err := poll(ctx, 200*time.Millisecond, time.Minute, t.Name+" as "+benchUser, func(ctx context.Context) error { return again(get(ctx, t.Client, t.URL)) })
	return err
}

// Per-cluster limits of the gateway: ordinary requests in flight to one
// cluster (default 16), and more waiting (default 32); beyond both it
// answers 429.
const (
	flagMaxPerCluster    = "max-requests-per-cluster"
	defaultMaxPerCluster = 16
)

// workersGatewayArgs raises the gateway's in-flight bound per cluster to the
// most workers of any load, so that the -workers-many loads show the one
// HTTP/2 connection rather than the limiter (429s beyond 16 + 32).
func workersGatewayArgs(conc int) []string {
	if n := max(conc, *manyWorkers); n > defaultMaxPerCluster {
		return []string{fmt.Sprintf("--%s=%d", flagMaxPerCluster, n)}
	}
	return nil
}

// burstResult is what a burst's workers saw.
type burstResult struct {
	n, errs  int
	firstErr error
	lat      []time.Duration
}

// burst runs conc keep-alive workers (t.Workers if set) for d.
func burst(ctx context.Context, t *target, conc int, d time.Duration) (b burstResult) {
	if t.Workers > 0 {
		conc = t.Workers
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	for range conc {
		wg.Go(func() {
			var mine burstResult
			for ctx.Err() == nil && time.Now().Before(deadline) {
				start := time.Now()
				if err := get(ctx, t.Client, t.URL); err != nil {
					mine.errs++
					mine.firstErr = cmp.Or(mine.firstErr, err)
					time.Sleep(10 * time.Millisecond) // no hot loop on a failing path
					continue
				}
				mine.lat = append(mine.lat, time.Since(start))
			}
			mu.Lock()
			defer mu.Unlock()
			b.lat, b.errs, b.firstErr = append(b.lat, mine.lat...), b.errs+mine.errs, cmp.Or(b.firstErr, mine.firstErr)
		})
	}
	wg.Wait()
	b.n = len(b.lat)
	return b
}

// measure adds one burst of t for d to r, and the CPU each of pids used
// meanwhile; r's elapsed time is the burst's alone.
func (r *loadResult) measure(ctx context.Context, t *target, conc int, d time.Duration, pids map[string]int) error {
	var b burstResult
	var elapsed time.Duration
	cpu, err := cpuDuring(pids, func() error { start := time.Now(); b = burst(ctx, t, conc, d); elapsed = time.Since(start); return nil })
	if err != nil {
		return err
	}
	r.Requests, r.Errors, r.FirstErr = r.Requests+b.n, r.Errors+b.errs, cmp.Or(r.FirstErr, b.firstErr)
	r.Elapsed += elapsed
	r.RoundRPS = append(r.RoundRPS, float64(b.n)/elapsed.Seconds())
	r.Lat = append(r.Lat, b.lat...)
	r.CPU = addCPU(r.CPU, cpu)
	return nil
}

// get is one request of the load (internal/testfrontend's, as pkg/proxy's benchmarks send).
func get(ctx context.Context, c *http.Client, url string) error { return testfrontend.Get(ctx, c, url) }

// runLoads warms every target, then runs rounds of each target in turn, so
// that the machine's noise spreads over all of them; the gateway is
// profiled (gatewayAdmin.profiled) in the first round of a profiled load.
func runLoads(ctx context.Context, gw *gatewayAdmin, targets []*target, conc, rounds int, total, warm time.Duration, profile string) error {
	for _, t := range targets {
		if t.TODO != "" {
			continue
		}
		if b := burst(ctx, t, conc, warm); b.errs > 0 {
			return fmt.Errorf("warm-up of %s: %d errors, first: %v", t.Name, b.errs, b.firstErr)
		}
	}
	per := total / time.Duration(rounds)
	for round := range rounds {
		for _, t := range targets {
			if t.TODO != "" {
				continue
			}
			load := func() error { return runRound(ctx, gw, t, conc, per, round == 0, round == rounds-1) }
			var err error
			if path := profilePath(profile, t.Key); path != "" && round == 0 {
				err = gw.profiled(ctx, per, path, load)
			} else {
				err = load()
			}
			if err != nil {
				return err
			}
			logf("round %d/%d %-28s %6.0f req/s so far", round+1, rounds, t.Name, t.Res.RPS())
		}
	}
	for _, t := range targets {
		slices.Sort(t.Res.Lat)
	}
	return ctx.Err()
}

// runRound is one round of t's load, with what it changed in the gateway,
// in the hub's SubjectAccessReviews and in each process's CPU.
func runRound(ctx context.Context, gw *gatewayAdmin, t *target, conc int, d time.Duration, first, last bool) error {
	r := &t.Res
	snap := func() (s gwState, sars float64, err error) {
		if s, err = gw.state(ctx); err == nil {
			sars, err = gw.hubSARs(ctx)
		}
		return s, sars, err
	}
	before, sars0, err := snap()
	if err != nil {
		return err
	}
	// The CPU is read before the scrape after the load, which costs the gateway CPU.
	if err := r.measure(ctx, t, conc, d, t.Pids); err != nil {
		return err
	}
	after, sars1, err := snap()
	if err != nil {
		return err
	}
	r.Authz.add(authzCount{sars0, before.Delegated}, authzCount{sars1, after.Delegated})
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

// The tables and figures of section 2 (report.md.tmpl).

// FirstErr is the first load that saw an error, or nil.
func (r *report) FirstErr() *target {
	for _, t := range r.Targets {
		if t.Res.FirstErr != nil {
			return t
		}
	}
	return nil
}

// ManyKeys are the loads that ran with -concurrency and with -workers-many
// workers; ManyWorkers is how many workers those had (0: none ran).
func (r *report) ManyKeys() []string {
	var keys []string
	for _, key := range []string{"direct", "bare", "gateway"} {
		if r.T(key) != nil && r.T(key+"-many") != nil {
			keys = append(keys, key)
		}
	}
	return keys
}

func (r *report) ManyWorkers() int {
	if keys := r.ManyKeys(); len(keys) > 0 {
		return r.T(keys[len(keys)-1] + "-many").Workers
	}
	return 0
}

// MaxPerCluster is the gateway's --max-requests-per-cluster in the loads.
func (r *report) MaxPerCluster() string {
	return flagValue(r.GatewayArgs, flagMaxPerCluster, fmt.Sprint(defaultMaxPerCluster))
}

// Gain is the req/s of key's -workers-many load over its -concurrency load
// (0 without both).
func (r *report) Gain(key string) float64 {
	few, many := r.T(key), r.T(key+"-many")
	if few == nil || many == nil || few.Res.RPS() == 0 {
		return 0
	}
	return many.Res.RPS() / few.Res.RPS()
}

// Built is what the loads through the gateway built: requests, and the pool
// entries, connections and tunnels they created (none in a steady state).
func (r *report) Built() (b struct{ Total, Created, Dials, Tunnels float64 }) {
	for _, t := range r.Targets {
		if gatewayLoads[t.Key] {
			b.Total += float64(t.Res.Requests)
			b.Created += t.Res.DCreations
			b.Dials += t.Res.DDials
			b.Tunnels += t.Res.DTunnels
		}
	}
	return b
}
