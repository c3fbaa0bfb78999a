package main

import (
	"fmt"
	"os"
	"strings"
	"time"
)

type report struct {
	Machine    machine
	Opts       options
	GoBench    *goBench
	Targets    []*target
	Pooled     *pooledResult
	Isolation  *isolationResult
	AB         *abResultSet   // ab.go
	Scan       *scanResult    // scan.go, report_scan.go
	Streams    *streamsResult // streams.go, report_streams.go
	Watches    *watchesResult // watches.go, report_watches.go
	EnvStartup time.Duration
	Capacity   int
	Total      time.Duration

	Profiles    []pathProfile // the gateway's CPU during loads (profile.go)
	GatewayArgs []string      // the gateway's flags, for the authorization cache TTLs
	AuthzIdle   *authzSteady  // SubjectAccessReviews without load (sar.go)
}

func (r *report) target(key string) *target {
	for _, t := range r.Targets {
		if t.Key == key && t.TODO == "" && t.res.Requests > 0 {
			return t
		}
	}
	return nil
}

func (r *report) markdown() string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "# Performance\n\nWritten by `make bench` (hack/bench); re-run it to refresh these numbers rather than editing them.\n\n")
	fmt.Fprintf(&b, "- Machine: %d CPUs (`nproc`), %s, %.1f GiB memory, Linux %s\n", m.CPUs, m.Model, m.MemGiB, m.Kernel)
	fmt.Fprintf(&b, "- Go: %s\n- Date: %s; the whole run took %s\n", m.Go, m.Started.UTC().Format("2006-01-02 15:04 MST"), r.Total.Round(time.Second))
	fmt.Fprintf(&b, "- Command: `make bench`, i.e. `go run ./hack/bench %s`\n", strings.Join(os.Args[1:], " "))
	fmt.Fprintf(&b, "- Noise: the CPUs are shared with other work, and the clients, proxies and kube-apiservers all run on them. "+
		"Every comparison is therefore taken side by side in this one run (the Go benchmarks in %d interleaved rounds, medians reported; loads in %d interleaved rounds), "+
		"and the ratios mean more than the absolute numbers.\n\n", r.Opts.BenchCount, r.Opts.Rounds)
	r.goalsSection(&b)
	if r.GoBench != nil {
		r.goBenchSection(&b)
	}
	if len(r.Targets) > 0 {
		r.loadSection(&b)
	}
	if r.Pooled != nil {
		r.pooledSection(&b)
	}
	if r.AB != nil {
		r.abSection(&b)
	}
	if r.Isolation != nil {
		r.isolationSection(&b)
	}
	if r.Scan != nil {
		r.scanSection(&b)
	}
	if r.Streams != nil {
		r.streamsSection(&b)
	}
	if r.Watches != nil {
		r.watchesSection(&b)
	}
	r.interpretation(&b)
	return b.String()
}

func (r *report) goBenchSection(b *strings.Builder) {
	fmt.Fprintf(b, "## 1. In-process benchmarks (pkg/proxy)\n\n`%s`\n\n", r.GoBench.Command)
	b.WriteString("One in-process upstream (TLS, HTTP/2, client-certificate auth) answers a Namespace GET (`get`, ~0.4 KiB) or a list of 100 pods (`list`, ~50 KiB). " +
		"Each benchmark sends GETs from 4×GOMAXPROCS goroutines over one keep-alive HTTP/2 client: `Direct` to the upstream; " +
		"`BareReverseProxy` through `httputil.ReverseProxy` with one shared transport; `ProxyGateway` through the real `Proxy.Serve` (what the gateway's route calls) with a real pool and the " +
		"informer cache (fed by a fake clientset: the hub is not measured), behind a TLS frontend that sets the user and RequestInfo as the generic server does, " +
		"without authentication or authorization (section 2 has those). `ServePieces` are the per-request steps of `Serve` before the round trip; " +
		"`fingerprint` is the Target's hash, which a pool entry computes only when its Target changed. ns/op of a parallel benchmark is wall time per request with every goroutine busy.\n\n")
	b.WriteString(r.GoBench.markdown())
	b.WriteString("\n")
}

func (r *report) loadSection(b *strings.Builder) {
	o := r.Opts
	fmt.Fprintf(b, "## 2. Under load in the local environment\n\n")
	fmt.Fprintf(b, "hack/localenv in a fresh `%s`: etcd, the hub kube-apiserver with aggregation, the gateway behind its APIService (`--pool-capacity=%d`), managed kube-apiservers, "+
		"and the konnectivity proxy-server and agent; all on 127.0.0.0/8, up in %s. Every path GETs `%s` of the same kind of cluster with %d keep-alive workers (rows that say otherwise: that many) sharing one HTTP/2 client "+
		"(as client-go does), %s per path in %d interleaved rounds after a %s warm-up. The gateway paths authenticate with the client certificate of `%s`, "+
		"a hub user bound to `cluster-gateway:proxy-reader` and not in system:masters (whom the delegated authorizer allows without asking the hub), "+
		"so every request is authorized as a real user's is.\n\n",
		o.StateDir, r.Capacity, r.EnvStartup.Round(time.Second), requestPath, o.Concurrency, o.Duration, o.Rounds, o.Warm, benchUser)
	b.WriteString("| path | req/s | req/s by round | p50 | p99 | errors | CPU/req gateway | CPU/req hub | CPU/req upstream | CPU/req konnectivity (server+agent) | CPU/req bare proxy | CPU/req bench process |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, t := range r.Targets {
		if t.TODO != "" {
			fmt.Fprintf(b, "| %s | %s |  |  |  |  |  |  |  |  |  |  |\n", t.Name, t.TODO)
			continue
		}
		res := &t.res
		var rounds []string
		for _, v := range res.RoundRPS {
			rounds = append(rounds, fmt.Sprintf("%.0f", v))
		}
		konn := cpuStr(res, "proxy-server", "proxy-agent")
		fmt.Fprintf(b, "| %s | %.0f | %s | %s | %s | %d | %s | %s | %s | %s | %s | %s |\n", t.Name, res.rps(), strings.Join(rounds, " / "),
			fmtDur(res.pct(0.50)), fmtDur(res.pct(0.99)), res.Errors,
			cpuStr(res, "gateway"), cpuStr(res, "hub"), cpuStr(res, t.Upstream), konn, cpuStr(res, "bare-proxy"), cpuStr(res, "bench"))
	}
	b.WriteString("\nThe spread between rounds of one path is this machine's noise; the ratios below compare paths whose rounds were interleaved.\n")
	b.WriteString("\nCPU per request is the process's utime+stime delta (/proc/<pid>/stat, 10 ms ticks) over the load divided by its requests; " +
		"`bench process` is getrusage of hack/bench itself, the load clients. The bare reverse proxy runs in a process of its own, as the gateway does. " +
		"The gateway, the bare proxy and the bench process run with Go's default GOGC=100. " +
		"A role that is not on a path shows its background CPU spread over that path's requests. A process's CPU per request also includes its " +
		"background work spread over fewer requests, and grows when more busy processes share the CPUs (compare the upstream column across rows), " +
		"so these are approximate.\n\n")
	for _, t := range r.Targets {
		if t.TODO == "" {
			fmt.Fprintf(b, "- %s: %s\n", t.Name, t.Via)
		}
	}
	if t := r.firstErr(); t != nil {
		fmt.Fprintf(b, "\nFirst error, on %s: `%v`\n", t.Name, t.res.FirstErr)
	}
	b.WriteString("\n### The gateway's pool and process during each load\n\n")
	b.WriteString("| path | requests | pool entries created | connections dialed | tunnels built | gateway allocations per request (objects / bytes) | gateway RSS before → after | goroutines before → after |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, t := range r.Targets {
		if t.TODO != "" {
			continue
		}
		res := &t.res
		fmt.Fprintf(b, "| %s | %d | %.0f | %.0f | %.0f | %.0f / %.0f | %s → %s | %.0f → %.0f |\n", t.Name, res.Requests, res.DCreations, res.DDials, res.DTunnels,
			res.DMallocs/float64(max(1, res.Requests)), res.DAllocBytes/float64(max(1, res.Requests)),
			mib(res.Before.RSS), mib(res.After.RSS), res.Before.Goroutines, res.After.Goroutines)
	}
	b.WriteString("\nCounters are `cluster_gateway_pool_entry_creations_total`, `cluster_gateway_pool_connection_dials_total` and `cluster_gateway_konnectivity_tunnel_builds_total` from the gateway's /metrics, " +
		"read before and after each round (after the warm-up, which creates the entries and dials the connections); so are the allocations, " +
		"`go_memstats_mallocs_total` and `go_memstats_alloc_bytes_total` (exact counts, including two /metrics scrapes per round; on a path " +
		"the gateway is not on, that is all they are). Goroutines are `go_goroutines`.\n\n")
	r.authzSection(b)
	r.profileSection(b)
	r.ratios(b)
	r.manyWorkersSection(b)
}

func (r *report) ratios(b *strings.Builder) {
	d, bare, gw, hub, konn, d3 := r.target("direct"), r.target("bare"), r.target("gateway"), r.target("hub"), r.target("konn"), r.target("direct3")
	b.WriteString("### Ratios\n\nThe CPU ratios and their baselines are in the goals table.\n\n")
	if d != nil && bare != nil && gw != nil {
		fmt.Fprintf(b, "- Gateway over Direct vs bare reverse proxy: req/s %.2f× (gateway %.0f, bare %.0f; direct %.0f); p50 %s vs %s (direct %s); p99 %s vs %s.\n",
			gw.res.rps()/bare.res.rps(), gw.res.rps(), bare.res.rps(), d.res.rps(),
			fmtDur(gw.res.pct(.5)), fmtDur(bare.res.pct(.5)), fmtDur(d.res.pct(.5)), fmtDur(gw.res.pct(.99)), fmtDur(bare.res.pct(.99)))
	}
	if gw != nil && hub != nil {
		h, _ := hub.res.cpuPerReq("hub")
		fmt.Fprintf(b, "- Through the hub vs the gateway's port: req/s %.2f×, p50 %s vs %s; the hub spends %s CPU per request.\n",
			hub.res.rps()/gw.res.rps(), fmtDur(hub.res.pct(.5)), fmtDur(gw.res.pct(.5)), fmtDur(h))
	}
	if konn != nil && gw != nil {
		gk, _ := konn.res.cpuPerReq("gateway")
		gd, _ := gw.res.cpuPerReq("gateway")
		fmt.Fprintf(b, "- Konnectivity vs Direct (both on the gateway's port): req/s %.2f× (%.0f vs %.0f), p50 %s vs %s, p99 %s vs %s; gateway CPU/req %s vs %s; proxy-server+agent add %s CPU per request.\n",
			konn.res.rps()/gw.res.rps(), konn.res.rps(), gw.res.rps(), fmtDur(konn.res.pct(.5)), fmtDur(gw.res.pct(.5)),
			fmtDur(konn.res.pct(.99)), fmtDur(gw.res.pct(.99)), fmtDur(gk), fmtDur(gd), cpuStr(&konn.res, "proxy-server", "proxy-agent"))
		if d3 != nil && d != nil {
			parity := d3.res.rps() / d.res.rps()
			verdict := "so the Konnectivity ratio is not an artefact of a slower cluster"
			if parity < 0.9 {
				verdict = "so part of the Konnectivity ratio may come from the slower cluster"
			}
			fmt.Fprintf(b, "- Upstream parity: direct to %s serves %.2f× the req/s of direct to managed-1, %s.\n", konn.Upstream, parity, verdict)
		}
	} else {
		b.WriteString("- Konnectivity vs Direct: TODO, not measured in this run (no konnectivity in the local environment).\n")
	}
	b.WriteString("\n")
}

func (r *report) pooledSection(b *strings.Builder) {
	p := r.Pooled
	n := float64(p.N)
	fmt.Fprintf(b, "## 3. Memory per pooled cluster\n\n")
	fmt.Fprintf(b, "%d ClusterGateways created as Secrets on the hub (alternately managed-1 and managed-2, distinct names, same credentials; %s until the gateway listed them all), "+
		"one GET through each on the gateway's port (%s), then deleted with one DeleteCollection (%s until every entry was retired and its connections closed). "+
		"Each figure is read right after a forced GC in the gateway (`/debug/pprof/heap?gc=1`), and each but the last row's is the median by live heap of %d such reads a second apart (as in section 5: the prober's probes in flight at one GC move a single read); the last row is polled every 5s until the heap in use is back within 10%% of what the entries added, or a minute has passed. Heap in use is `go_memstats_heap_inuse_bytes`, live heap what that GC marked (as in section 5), RSS is VmRSS.\n\n",
		p.N, p.CreateTime.Round(100*time.Millisecond), p.RequestTime.Round(100*time.Millisecond), p.DeleteTime.Round(100*time.Millisecond), settleSamples)
	b.WriteString("| gateway state | heap in use | live heap | RSS | goroutines | pool entries | open connections |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, row := range []struct {
		name string
		s    memState
	}{
		{"before", p.Base},
		{fmt.Sprintf("%d stored, unused", p.N), p.Stored},
		{fmt.Sprintf("%d pooled (one request each)", p.N), p.Pooled},
		{"right after deleting them", p.Deleted},
		{fmt.Sprintf("%s later", p.ReleaseTime.Round(time.Second)), p.Released},
	} {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %.0f | %.0f | %.0f |\n", row.name, mib(row.s.Heap), mib(row.s.Marked), mib(row.s.RSS), row.s.Goroutines, row.s.Entries, row.s.OpenConns)
	}
	fmt.Fprintf(b, "\n- Per pooled cluster (pool entry, its transport and client key pair, and its one open HTTP/2 connection with its read loop): **%s heap, %s RSS, %.1f goroutines**.\n",
		kib((p.Pooled.Heap-p.Stored.Heap)/n), kib((p.Pooled.RSS-p.Stored.RSS)/n), (p.Pooled.Goroutines-p.Stored.Goroutines)/n)
	fmt.Fprintf(b, "- Per stored gateway (its parsed form and credential in the informer cache): %s heap, %s RSS.\n",
		kib((p.Stored.Heap-p.Base.Heap)/n), kib((p.Stored.RSS-p.Base.RSS)/n))
	// Nothing may keep a deleted gateway's entry reachable: x/net's own
	// HTTP/2 health check did, for ReadIdleTimeout after the close
	// (golang/go#80920), until the pool's replaced it.
	left, grown := p.Deleted.Marked-p.Base.Marked, p.Pooled.Marked-p.Base.Marked
	if left <= grown/10 {
		fmt.Fprintf(b, "- Right after deletion, entries, connections and goroutines are back to the start, and so is the live heap (%s above it, of %s the pooled gateways had added): "+
			"nothing keeps a retired entry reachable (the pool's HTTP/2 health checks stop with their entry; x/net's, off here, kept each closed connection reachable for its `ReadIdleTimeout`, "+
			"[golang/go#80920](https://github.com/golang/go/issues/80920)). ", mib(left), mib(grown))
	} else {
		fmt.Fprintf(b, "- **Right after deletion, entries, connections and goroutines are back to the start but the live heap is still %s above it** (of %s the pooled gateways had added): "+
			"something keeps retired entries reachable; the heap profiles `gateway-heap-deleted.pprof` and `gateway-heap-before.pprof` in the state directory say what. ", mib(left), mib(grown))
	}
	fmt.Fprintf(b, "The heap in use is %s above the start then (the free room of spans that still hold other objects) and %s above it %s later; "+
		"RSS stays higher (%s) because the Go runtime returns freed pages to the OS lazily.\n\n",
		mib(p.Deleted.Heap-p.Base.Heap), mib(p.Released.Heap-p.Base.Heap), p.ReleaseTime.Round(time.Second), mib(p.Released.RSS-p.Base.RSS))
}

func (r *report) interpretation(b *strings.Builder) {
	b.WriteString("## Interpretation\n\n")
	var total, created, dials, tunnels float64
	for _, t := range r.Targets {
		if gatewayLoads[t.Key] {
			total += float64(t.res.Requests)
			created += t.res.DCreations
			dials += t.res.DDials
			tunnels += t.res.DTunnels
		}
	}
	if total > 0 {
		if created == 0 && dials == 0 && tunnels == 0 {
			fmt.Fprintf(b, "- Steady state builds nothing per request: %.0f requests through the gateway created 0 pool entries (transports), dialed 0 connections and built 0 konnectivity tunnels.\n", total)
		} else {
			fmt.Fprintf(b, "- **%.0f requests through the gateway created %.0f pool entries, dialed %.0f connections and built %.0f tunnels during the loads**: look at the gateway's log.\n", total, created, dials, tunnels)
		}
	}
	if gb := r.GoBench; gb != nil {
		g, bare := gb.median("BenchmarkProxyGateway/get", nsOp), gb.median("BenchmarkBareReverseProxy/get", nsOp)
		if g > 0 && bare > 0 {
			fmt.Fprintf(b, "- In process, the proxy handler costs %.2f× a bare `httputil.ReverseProxy` per small GET (%+.0f allocs/op); "+
				"under load the gateway process also runs the generic API server's filters in front of the handler, which any aggregated API server pays.\n", g/bare,
				gb.median("BenchmarkProxyGateway/get", allocsOp)-gb.median("BenchmarkBareReverseProxy/get", allocsOp))
		}
	}
	if d, gw := r.target("direct"), r.target("gateway"); d != nil && gw != nil {
		fmt.Fprintf(b, "- On %d shared CPUs the loads are CPU-bound: req/s measures the total CPU of a path's processes more than any hop's latency. "+
			"Direct needs only the client and one kube-apiserver; every proxy adds a TLS server, a TLS client and a copy of the body on the same CPUs, "+
			"so a proxied path cannot approach direct's req/s here (gateway port %.2f× direct).\n", r.Machine.CPUs, gw.res.rps()/d.res.rps())
	}
	if len(r.Targets) > 0 && r.target("konn") == nil { // not with -only
		b.WriteString("- Konnectivity was not measured in this run (TODO row above).\n")
	}
	notMeasured := "large lists through the real clusters, many distinct clusters under load at once, and a dedicated machine"
	if r.Watches == nil {
		notMeasured = "idle watches (section 7 not run), " + notMeasured
	}
	if r.Streams == nil {
		notMeasured = "streams (section 6 not run), " + notMeasured
	}
	b.WriteString("- Not measured: " + notMeasured + ".\n")
}

func (r *report) firstErr() *target {
	for _, t := range r.Targets {
		if t.res.FirstErr != nil {
			return t
		}
	}
	return nil
}

// bareProxyCPU is the bare proxy's CPU per request in its row (its own
// process's, like the gateway's).
func bareProxyCPU(bare *target) time.Duration {
	c, _ := bare.res.cpuPerReq("bare-proxy")
	return c
}

func cpuStr(res *loadResult, roles ...string) string {
	var sum time.Duration
	for _, role := range roles {
		c, ok := res.cpuPerReq(role)
		if !ok {
			return "–"
		}
		sum += c
	}
	return fmtDur(sum)
}

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	}
}

func mib(v float64) string { return fmt.Sprintf("%.1f MiB", v/(1<<20)) }
func kib(v float64) string { return fmt.Sprintf("%.1f KiB", v/(1<<10)) }
