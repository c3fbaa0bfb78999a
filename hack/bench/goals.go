package main

import "fmt"

// goal is one of the performance goals (docs/performance.md), judged from this run's measurements.
type goal struct {
	Goal     string  // what is required
	Limit    float64 // the bound on Value
	AtLeast  bool    // Value must be >= Limit (else <= Limit)
	Value    float64 // the measured ratio (or count)
	Measured string  // how Value was obtained, for the table
	Missing  string  // why it was not measured; empty when it was
	Evidence bool    // a check of the bench's own, not one of the goals
}

// met says whether the measurement meets the goal.
func (g goal) met() bool {
	if g.AtLeast {
		return g.Value >= g.Limit
	}
	return g.Value <= g.Limit
}

func (g goal) Verdict() string {
	switch {
	case g.Missing != "":
		return "not measured (" + g.Missing + ")"
	case g.met():
		return "**met**"
	default:
		return "**not met**"
	}
}

// is returns g measured: value, and how it was obtained.
func (g goal) is(value float64, format string, args ...any) goal {
	g.Value, g.Measured, g.Missing = value, fmt.Sprintf(format, args...), ""
	return g
}

// not returns g not measured, and why.
func (g goal) not(why string) goal { g.Missing = why; return g }

// goalList is the goals table.
type goalList []goal

// Judged counts the goals measured, Met those of them met (the bench's own
// checks are not goals).
func (gs goalList) Judged() int { return gs.count(func(goal) bool { return true }) }
func (gs goalList) Met() int    { return gs.count(goal.met) }

func (gs goalList) count(f func(goal) bool) int {
	n := 0
	for _, g := range gs {
		if g.Missing == "" && !g.Evidence && f(g) {
			n++
		}
	}
	return n
}

// allocBudget is the in-process goal's bound on the handler's allocations
// per request beyond the bare proxy's (the benchmarks' allocs/op).
const allocBudget = 20

// sarLimit is what "≈ 0 SubjectAccessReviews per 1,000 requests" is taken
// to mean: at most one review per 1,000 requests, i.e. the cache answered
// 99.9% of them (one review per TTL per caller and attributes is expected).
const sarLimit = 1.0

// Goals computes every goal from the loads, the Go benchmarks and the
// counters of this run, in the order of the table.
func (r *report) Goals() goalList {
	out := goalList(r.loadGoals())
	out = append(out, r.goBenchGoals()...)
	out = append(out, r.authzGoal())
	out = append(out, r.scanGoals()...)
	out = append(out, r.streamGoals()...)
	out = append(out, r.watchGoals()...)
	return append(out, r.fanoutGoals()...)
}

// loadGoals are the goals of section 2: the gateway port against the bare
// proxy, the gateway behind the hub against the hub, Konnectivity against
// Direct.
func (r *report) loadGoals() []goal {
	bare, gw, hub, konn := r.T("bare"), r.T("gateway"), r.T("hub"), r.T("konn")
	w := r.Opts.Concurrency
	rps := goal{Goal: fmt.Sprintf("Gateway port, Direct, %d workers: req/s ≥ 0.90× the bare reverse proxy's", w), Limit: 0.90, AtLeast: true}.not("gateway or bare load not run")
	cpu := goal{Goal: fmt.Sprintf("Gateway port, Direct, %d workers: gateway CPU per request ≤ 1.5× the bare proxy's", w), Limit: 1.5}.not("gateway or bare load not run")
	if gw != nil && bare != nil {
		rps = rps.is(gw.Res.RPS()/bare.Res.RPS(), "%.2f× (%.0f vs %.0f req/s)", gw.Res.RPS()/bare.Res.RPS(), gw.Res.RPS(), bare.Res.RPS())
		gc, bc := gw.Res.PerReq("gateway"), bare.Res.PerReq("bare-proxy")
		if bc > 0 {
			cpu = cpu.is(ratio(gc, bc), "%.2f× (%s vs %s)", ratio(gc, bc), fmtDur(gc), fmtDur(bc))
		} else {
			cpu = cpu.not("the bare proxy's CPU per request came out ≤ 0")
		}
	}

	hubGoal := goal{Goal: "Through the hub: the gateway's CPU per request ≤ 0.5× the hub kube-apiserver's", Limit: 0.5}.not("hub load not run")
	if hub != nil {
		gc, ok1 := hub.Res.cpuPerReq("gateway")
		hc, ok2 := hub.Res.cpuPerReq("hub")
		if ok1 && ok2 && hc > 0 {
			hubGoal = hubGoal.is(ratio(gc, hc), "%.2f× (%s vs %s)", ratio(gc, hc), fmtDur(gc), fmtDur(hc))
			// The baseline: a proxy that adds nothing of its own behind the same hub.
			if bh := r.T("hub-bare"); bh != nil {
				if bc, bhc := bh.Res.PerReq("bare-proxy"), bh.Res.PerReq("hub"); bc > 0 && bhc > 0 {
					hubGoal.Measured += fmt.Sprintf("; the bare proxy behind the same hub: %.2f× (%s vs %s)", ratio(bc, bhc), fmtDur(bc), fmtDur(bhc))
				}
			}
		} else {
			hubGoal = hubGoal.not("no CPU figures")
		}
	}

	konnGoal := goal{Goal: "Konnectivity: the gateway's CPU per request ≤ 1.15× its Direct CPU per request (proxy-server and agent not judged)", Limit: 1.15}.not("Konnectivity or gateway load not run")
	if konn != nil && gw != nil {
		kc, dc := konn.Res.PerReq("gateway"), gw.Res.PerReq("gateway")
		konnGoal = konnGoal.is(ratio(kc, dc), "%.2f× (%s vs %s; proxy-server + agent: %s more)", ratio(kc, dc), fmtDur(kc), fmtDur(dc), cpuStr(&konn.Res, "proxy-server", "proxy-agent"))
		// The baseline: what konnectivity-client's tunnel costs a proxy that adds nothing of its own.
		if bk, b := r.T("bare-konn"), r.T("bare"); bk != nil && b != nil {
			if k, d := bk.Res.PerReq("bare-proxy"), b.Res.PerReq("bare-proxy"); k > 0 && d > 0 {
				konnGoal.Measured += fmt.Sprintf("; the bare proxy over the same tunnel: %.2f× (%s vs %s)", ratio(k, d), fmtDur(k), fmtDur(d))
			}
		}
	}
	return []goal{rps, cpu, hubGoal, konnGoal}
}

// goBenchGoals are the in-process goals: the handler's ns/op and allocs/op
// against the bare proxy's, medians of section 1.
func (r *report) goBenchGoals() []goal {
	var out []goal
	for _, body := range []string{"get", "list"} {
		ns := goal{Goal: fmt.Sprintf("In process (`%s`): handler ns/op ≤ 1.10× the bare proxy's", body), Limit: 1.10}.not("Go benchmarks not run")
		allocs := goal{Goal: fmt.Sprintf("In process (`%s`): handler allocs/op ≤ the bare proxy's + %d", body, allocBudget), Limit: allocBudget}.not("Go benchmarks not run")
		if gb := r.GoBench; gb != nil {
			g, b := "BenchmarkProxyGateway/"+body, "BenchmarkBareReverseProxy/"+body
			gn, bn, ga, ba := gb.median(g, nsOp), gb.median(b, nsOp), gb.median(g, allocsOp), gb.median(b, allocsOp)
			if gn > 0 && bn > 0 {
				ns = ns.is(gn/bn, "%.2f× (%s vs %s)", gn/bn, fmtNs(gn), fmtNs(bn))
				allocs = allocs.is(ga-ba, "%+.0f (%.0f vs %.0f allocs/op)", ga-ba, ga, ba)
			}
		}
		out = append(out, ns, allocs)
	}
	return out
}

// authzGoal is the bench's own check that the gateway's authorization
// cache answers: SubjectAccessReviews per 1,000 requests right after a
// decision was filled.
func (r *report) authzGoal() goal {
	g := goal{Goal: fmt.Sprintf("Delegated authorization cached after warm-up: SubjectAccessReviews on the hub ≤ %.0f per 1,000 requests through the gateway, right after a caller's decision was filled", sarLimit),
		Limit: sarLimit, Evidence: true}
	n, sars, delegated := r.gatewayAuthz(true)
	if n == 0 {
		return g.not("no window after a fill: no gateway load, or -authz-window 0")
	}
	return g.is(perThousand(sars, n), "%.2f (%.0f SARs on the hub, %.0f sent by the gateway, %d requests in %s windows)", perThousand(sars, n), sars, delegated, n, r.SteadyWindow())
}

// scanGoals are the memory goals (a scan of 10,000 gateways), judged from
// the scan.
func (r *report) scanGoals() []goal {
	s := r.Scan
	const missing = "no scan in this run (-scan-gateways 0)"
	create := goal{Goal: "Creating 10,000 gateways with the gateway running: peak RSS ≤ 300 MB", Limit: scanPeakRSSGoal}.not(missing)
	peak := goal{Goal: "Scan of 10,000 gateways, default pool: peak RSS ≤ 300 MB", Limit: scanPeakRSSGoal}.not(missing)
	heap := goal{Goal: "Scan: live heap after eviction ≤ the pool's share (entries × measured size per entry, within 10%)", Limit: scanHeapTolerance}.not(missing)
	settle := goal{Goal: "Scan: RSS one minute after ≤ 1.2× the settled RSS", Limit: 1.2}.not(missing)
	if s == nil {
		return []goal{create, peak, heap, settle}
	}
	if c := s.CreatingPeak(); c > 0 {
		create = create.is(c, "%s (%.0f MB) with %d gateways created (section 5)", mib(c), c/1e6, s.N)
	} else {
		create = create.not("the scan read no peak while creating")
	}
	p := s.PeakRSS()
	peak = peak.is(p, "%s (%.0f MB) with %d gateways (section 5)", mib(p), p/1e6, s.N)
	if s.AfterGC.Entries > 0 {
		heap = heap.is(s.shareRatio(s.AfterGC), "%.2f× (%s above the stored gateways for %.0f entries)", s.shareRatio(s.AfterGC), mib(s.AfterGC.Marked-s.Stored.Marked), s.AfterGC.Entries)
	} else {
		heap = heap.not("the pool was empty after the scan")
	}
	if s.Settled.RSS > 0 && s.Stable {
		rr := s.After.RSS / s.Settled.RSS
		settle = settle.is(rr, "%.2f× (%s vs %s)", rr, mib(s.After.RSS), mib(s.Settled.RSS))
	} else {
		settle = settle.not("RSS had not settled by the end of the scan section")
	}
	return []goal{create, peak, heap, settle}
}

// streamGoals are the streams section's goals: the gateway's bandwidth
// against direct (Direct) and against the bare proxy over the same tunnel
// (Konnectivity), and its CPU per MB against the bare proxy's.
func (r *report) streamGoals() []goal {
	s := r.Streams
	const missing = "streams not run, or a path failed (section 6)"
	var out []goal
	for _, c := range streamComparisons {
		for _, kind := range byteKinds {
			g := goal{Goal: fmt.Sprintf("Streams, %s: gateway %s bandwidth ≥ %.2f× %s", c.where, kindOf(kind).Name, streamGoalRatio, c.baseName), Limit: streamGoalRatio, AtLeast: true}.not(missing)
			if gw, base := s.result(c.gw, kind), s.result(c.base, kind); gw != nil && base != nil {
				g = g.is(gw.rate()/base.rate(), "%.2f× (%.1f vs %.1f MB/s)", gw.rate()/base.rate(), gw.rate(), base.rate())
				if bare := s.result("bare", kind); c.base == "direct" && bare != nil {
					g.Measured += fmt.Sprintf("; the bare proxy: %.2f× direct", bare.rate()/base.rate())
				}
			}
			out = append(out, g)
		}
	}
	g := goal{Goal: fmt.Sprintf("Streams, Direct: gateway CPU per MB (port-forward and exec) ≤ %.1f× the bare proxy's", streamCPUGoal), Limit: streamCPUGoal}.not(missing)
	gc, gok := s.cpuPerMB("gateway", "gateway")
	bc, bok := s.cpuPerMB("bare", "bare-proxy")
	if gok && bok && bc > 0 {
		g = g.is(ratio(gc, bc), "%.2f× (%s vs %s per MB)", ratio(gc, bc), fmtDur(gc), fmtDur(bc))
		kc, ok1 := s.cpuPerMB("konn", "gateway")
		bkc, ok2 := s.cpuPerMB("bare-konn", "bare-proxy")
		if ok1 && ok2 && bkc > 0 {
			g.Measured += fmt.Sprintf("; over Konnectivity %.2f× (%s vs %s)", ratio(kc, bkc), fmtDur(kc), fmtDur(bkc))
		}
	}
	return append(out, g)
}

// watchMemGoal bounds the gateway's live memory per idle watch over the
// bare proxy's.
const watchMemGoal = 1.2

// watchGoals judges what a watch holds (Go heap and stacks), not RSS: a
// buffer on pages never used before is resident only where written, a
// reused one wholly, so RSS depends on the process's history (section 7
// shows both).
func (r *report) watchGoals() []goal {
	g := goal{Goal: fmt.Sprintf("Idle watches through the gateway port: memory per watch (Go heap + goroutine stacks) ≤ %.1f× the bare proxy's", watchMemGoal), Limit: watchMemGoal}
	gw, bare := r.Watches.Holder("gateway"), r.Watches.Holder("bare")
	switch {
	case gw == nil || bare == nil:
		g = g.not("no watches in this run (-watches 0, or -only another section)")
	case bare.PerWatch().Live() <= 0:
		g = g.not("the bare proxies' memory did not grow with the watches")
	default:
		gp, bp := gw.PerWatch(), bare.PerWatch()
		g = g.is(gp.Live()/bp.Live(), "%.2f× (%s vs %s per watch, %d watches; RSS %.2f×: %s vs %s, section 7)", gp.Live()/bp.Live(), kib(gp.Live()), kib(bp.Live()), gw.Watches,
			gp.RSS/bp.RSS, kib(gp.RSS), kib(bp.RSS))
	}
	return []goal{g}
}

// perThousand is n per 1,000 requests.
func perThousand(n float64, requests int) float64 {
	if requests == 0 {
		return 0
	}
	return n * 1000 / float64(requests)
}
