package main

import (
	"fmt"
	"strings"
)

// authzSection shows, per load, the delegated authorization calls of the
// gateway and the SubjectAccessReviews the hub received.
func (r *report) authzSection(b *strings.Builder) {
	b.WriteString("### Delegated authorization during each load\n\n")
	fmt.Fprintf(b, "| path | workers | requests | gateway authorization calls to the hub | SubjectAccessReviews on the hub | SARs per round | SARs per 1,000 requests "+
		"| fresh caller: SARs filling its decision | then: requests | SARs | SARs per 1,000 requests |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, t := range r.Targets {
		if t.TODO != "" {
			continue
		}
		a, s := t.res.Authz, t.res.Steady
		steady := "| – | – | – | –"
		if s.Requests > 0 {
			steady = fmt.Sprintf("| %.0f | %d | %.0f | %.2f", s.Filled, s.Requests, s.HubSARs, perThousand(s.HubSARs, s.Requests))
		}
		fmt.Fprintf(b, "| %s | %d | %d | %.0f | %.0f | %.1f | %.2f %s |\n", t.Name, workersOf(t, r.Opts.Concurrency), t.res.Requests, a.Delegated, a.HubSARs,
			a.HubSARs/float64(max(1, len(t.res.RoundRPS))), perThousand(a.HubSARs, t.res.Requests), steady)
	}
	if i := r.AuthzIdle; i != nil {
		fmt.Fprintf(b, "| no load for %s (control) | – | – | – | – | – | – | – | 0 | %.0f (the gateway asked %.0f) | – |\n", i.Window, i.HubSARs, i.Delegated)
	}
	allowTTL := flagValue(r.GatewayArgs, flagAllowTTL, defaultAuthzTTL.String()+", the default")
	denyTTL := flagValue(r.GatewayArgs, flagDenyTTL, defaultAuthzTTL.String()+", the default")
	b.WriteString("\nThe gateway's counter is `apiserver_delegated_authz_request_total` (its /metrics, all codes); the hub's is " +
		"`apiserver_request_total{resource=\"subjectaccessreviews\"}` (the hub kube-apiserver's /metrics), both read before and after " +
		"each round, i.e. after the warm-up. The gateway caches each decision per caller and request attributes, so a load costs about one review per cache TTL. " +
		"The direct and bare rows are the control: nothing there asks the hub. ")
	fmt.Fprintf(b, "The fresh-caller columns: after the rounds, each gateway path was loaded once more as a caller no load had used (`%s-<load>`, bound alike), "+
		"whose warm-up filled the decision, and then for %s more.", benchUser, r.steadyWindow())
	if r.AuthzIdle != nil {
		b.WriteString(" The control row is as long as those windows together, without load (the hub also calls the gateway on its own, e.g. to check the APIService).")
	}
	b.WriteString("\n\n")
	fmt.Fprintf(b, "The cache is the generic webhook authorizer's; its TTLs are gateway flags, `--%s` (here %s) and `--%s` (here %s). "+
		"With `--authorize-proxy-subpath` the gateway also authorizes each proxied request's inner verb and resource, one more cached decision per distinct "+
		"inner request; this run does not set it.\n\n", flagAllowTTL, allowTTL, flagDenyTTL, denyTTL)
}

// profileSection lists the gateway's CPU and heap profiles of each
// profiled load, and each CPU profile's top functions as pprof prints them.
func (r *report) profileSection(b *strings.Builder) {
	if len(r.Profiles) == 0 {
		return
	}
	b.WriteString("### The gateway's CPU profiles\n\nThe gateway is CPU-profiled during the first round of each of these loads, " +
		"and a heap profile is written right before and after that round (its allocations: `go tool pprof -sample_index=alloc_objects -diff_base <before> <after>`). " +
		"Each profile also covers the /metrics scrape that begins its round. The top functions by their own CPU:\n\n")
	for _, p := range r.Profiles {
		fmt.Fprintf(b, "Gateway %s: `go tool pprof %s`; heap profiles `%s` and `%s`.\n\n", p.What, p.Path, allocPath(p.Path, "before"), allocPath(p.Path, "after"))
		p.topBlock(b)
	}
}

// topBlock is the profile's pprof top as a code block, or why it is absent.
func (p *pathProfile) topBlock(b *strings.Builder) {
	if p.Top == "" {
		b.WriteString("(pprof could not read it.)\n\n")
		return
	}
	fmt.Fprintf(b, "```\n%s\n```\n\n", p.Top)
}

// manyWorkersSection compares the loads with -workers-many workers to the
// same paths with -concurrency: every client keeps one HTTP/2 connection,
// and the gateway one pooled connection to the cluster.
func (r *report) manyWorkersSection(b *strings.Builder) {
	var lines []string
	var n int
	for _, key := range []string{"direct", "bare", "gateway"} {
		few, many := r.target(key), r.target(key+"-many")
		if few == nil || many == nil {
			continue
		}
		n = workersOf(many, 0)
		lines = append(lines, fmt.Sprintf("- %s: %.0f req/s with %d workers vs %.0f with %d (%.2f×); p50 %s vs %s, p99 %s vs %s.",
			few.Name, many.res.rps(), n, few.res.rps(), r.Opts.Concurrency, many.res.rps()/few.res.rps(),
			fmtDur(many.res.pct(.5)), fmtDur(few.res.pct(.5)), fmtDur(many.res.pct(.99)), fmtDur(few.res.pct(.99))))
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(b, "### %d workers to one cluster\n\n", n)
	fmt.Fprintf(b, "The gateway ran with `--%s=%s` so that it forwards all %d at once: with its default bound, %d in flight per cluster and `--max-queued-per-cluster` 32 waiting, "+
		"it would hold most of them in its queue and answer 429 beyond both, and the row would show the limiter rather than the connection.\n\n",
		flagMaxPerCluster, flagValue(r.GatewayArgs, flagMaxPerCluster, fmt.Sprint(defaultMaxPerCluster)), n, defaultMaxPerCluster)
	b.WriteString(strings.Join(lines, "\n") + "\n")
	gw, bare := r.target("gateway-many"), r.target("bare-many")
	if gw != nil && bare != nil {
		fmt.Fprintf(b, "- Gateway port vs bare reverse proxy with %d workers: req/s %.2f×", n, gw.res.rps()/bare.res.rps())
		gc, _ := gw.res.cpuPerReq("gateway")
		bc := bareProxyCPU(bare)
		fmt.Fprintf(b, ", CPU per request %s vs %s (%.2f×)", fmtDur(gc), fmtDur(bc), ratio(gc, bc))
		if gw.res.DDials == 0 {
			fmt.Fprintf(b, "; the gateway dialed no connection during its %d-worker load, so all of it went over the one pooled HTTP/2 connection to the cluster.\n", n)
		} else {
			fmt.Fprintf(b, "; the gateway dialed %.0f connections during its %d-worker load (see the pool table).\n", gw.res.DDials, n)
		}
	}
	fmt.Fprintf(b, "\nEvery client here is one HTTP/2 connection (as client-go's), and so are the gateway's and the bare proxy's to the cluster. "+
		"A path held back by its one connection would gain less from %d to %d workers than direct does on the same %d CPUs, with latency growing "+
		"in proportion to the workers; a path held back by CPU gains as little as direct.", r.Opts.Concurrency, n, r.Machine.CPUs)
	if g, d := r.gain("gateway"), r.gain("direct"); g > 0 && d > 0 {
		if g >= d {
			fmt.Fprintf(b, " Here req/s changed by %.2f× on the gateway port and by %.2f× direct: the gateway port scaled no worse than direct, "+
				"so its one connection to the cluster was not what held it back at %d workers.", g, d, n)
		} else {
			fmt.Fprintf(b, " Here req/s changed by %.2f× on the gateway port and by %.2f× direct: the gateway port scaled worse than direct, "+
				"so its one connection to the cluster, or its own CPU, held it back at %d workers.", g, d, n)
		}
	}
	b.WriteString("\n\n")
}

// gain is the req/s of key's -workers-many load over its -concurrency load
// (0 without both).
func (r *report) gain(key string) float64 {
	few, many := r.target(key), r.target(key+"-many")
	if few == nil || many == nil || few.res.rps() == 0 {
		return 0
	}
	return many.res.rps() / few.res.rps()
}
