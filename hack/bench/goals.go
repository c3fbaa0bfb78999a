package main

import (
	"fmt"
	"strings"
	"time"
)

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

func (g goal) verdict() string {
	switch {
	case g.Missing != "":
		return "not measured (" + g.Missing + ")"
	case g.met():
		return "**met**"
	default:
		return "**not met**"
	}
}

// goals computes every goal from the loads, the Go benchmarks and the
// counters of this run.
func (r *report) goals() []goal {
	bare, gw, hub, konn := r.target("bare"), r.target("gateway"), r.target("hub"), r.target("konn")
	w := r.Opts.Concurrency
	var out []goal

	g := goal{Goal: fmt.Sprintf("Gateway port, Direct, %d workers: req/s ≥ 0.90× the bare reverse proxy's", w), Limit: 0.90, AtLeast: true}
	if gw != nil && bare != nil {
		g.Value = gw.res.rps() / bare.res.rps()
		g.Measured = fmt.Sprintf("%.2f× (%.0f vs %.0f req/s)", g.Value, gw.res.rps(), bare.res.rps())
	} else {
		g.Missing = "gateway or bare load not run"
	}
	out = append(out, g)

	g = goal{Goal: fmt.Sprintf("Gateway port, Direct, %d workers: gateway CPU per request ≤ 1.5× the bare proxy's", w), Limit: 1.5}
	if gw != nil && bare != nil {
		gc, _ := gw.res.cpuPerReq("gateway")
		bc := bareProxyCPU(bare)
		if bc > 0 {
			g.Value = ratio(gc, bc)
			g.Measured = fmt.Sprintf("%.2f× (%s vs %s)", g.Value, fmtDur(gc), fmtDur(bc))
		} else {
			g.Missing = "the bare proxy's CPU per request came out ≤ 0"
		}
	} else {
		g.Missing = "gateway or bare load not run"
	}
	out = append(out, g)

	g = goal{Goal: "Through the hub: the gateway's CPU per request ≤ 0.5× the hub kube-apiserver's", Limit: 0.5}
	if hub != nil {
		gc, ok1 := hub.res.cpuPerReq("gateway")
		hc, ok2 := hub.res.cpuPerReq("hub")
		if ok1 && ok2 && hc > 0 {
			g.Value = ratio(gc, hc)
			g.Measured = fmt.Sprintf("%.2f× (%s vs %s)", g.Value, fmtDur(gc), fmtDur(hc))
			if bc, bh, ok := r.bareBehindHub(); ok {
				g.Measured += fmt.Sprintf("; the bare proxy behind the same hub: %.2f× (%s vs %s)", ratio(bc, bh), fmtDur(bc), fmtDur(bh))
			}
		} else {
			g.Missing = "no CPU figures"
		}
	} else {
		g.Missing = "hub load not run"
	}
	out = append(out, g)

	g = goal{Goal: "Konnectivity: the gateway's CPU per request ≤ 1.15× its Direct CPU per request (proxy-server and agent not judged)", Limit: 1.15}
	switch {
	case konn != nil && gw != nil:
		kc, _ := konn.res.cpuPerReq("gateway")
		dc, _ := gw.res.cpuPerReq("gateway")
		g.Value = ratio(kc, dc)
		g.Measured = fmt.Sprintf("%.2f× (%s vs %s; proxy-server + agent: %s more)", g.Value, fmtDur(kc), fmtDur(dc), cpuStr(&konn.res, "proxy-server", "proxy-agent"))
		if bk, bd, ok := r.bareTunnelCost(); ok {
			g.Measured += fmt.Sprintf("; the bare proxy over the same tunnel: %.2f× (%s vs %s)", ratio(bk, bd), fmtDur(bk), fmtDur(bd))
		}
	default:
		g.Missing = "Konnectivity or gateway load not run"
	}
	out = append(out, g)

	for _, body := range []string{"get", "list"} {
		gn, bn, ga, ba := r.goBenchPair(body)
		g = goal{Goal: fmt.Sprintf("In process (`%s`): handler ns/op ≤ 1.10× the bare proxy's", body), Limit: 1.10}
		if gn > 0 && bn > 0 {
			g.Value = gn / bn
			g.Measured = fmt.Sprintf("%.2f× (%s vs %s)", g.Value, fmtNs(gn), fmtNs(bn))
		} else {
			g.Missing = "Go benchmarks not run"
		}
		out = append(out, g)
		g = goal{Goal: fmt.Sprintf("In process (`%s`): handler allocs/op ≤ the bare proxy's + %d", body, allocBudget), Limit: allocBudget}
		if gn > 0 && bn > 0 {
			g.Value = ga - ba
			g.Measured = fmt.Sprintf("%+.0f (%.0f vs %.0f allocs/op)", g.Value, ga, ba)
		} else {
			g.Missing = "Go benchmarks not run"
		}
		out = append(out, g)
	}

	g = goal{Goal: fmt.Sprintf("Delegated authorization cached after warm-up: SubjectAccessReviews on the hub ≤ %.0f per 1,000 requests through the gateway, right after a caller's decision was filled", sarLimit),
		Limit: sarLimit, Evidence: true}
	if n, sars, delegated := r.gatewayAuthz(true); n > 0 {
		g.Value = perThousand(sars, n)
		g.Measured = fmt.Sprintf("%.2f (%.0f SARs on the hub, %.0f sent by the gateway, %d requests in %s windows)", g.Value, sars, delegated, n, r.steadyWindow())
	} else {
		g.Missing = "no window after a fill: no gateway load, or -authz-window 0"
	}
	out = append(out, g)
	out = append(out, r.scanGoals()...)
	out = append(out, r.streamGoals()...)
	return append(out, r.watchGoals()...)
}

// bareTunnelCost is the bare proxy's CPU per request over Konnectivity and
// over its direct connection: what konnectivity-client's tunnel costs a
// proxy that adds nothing of its own.
func (r *report) bareTunnelCost() (konn, direct time.Duration, ok bool) {
	bk, bare := r.target("bare-konn"), r.target("bare")
	if bk == nil || bare == nil {
		return 0, 0, false
	}
	konn, direct = bareProxyCPU(bk), bareProxyCPU(bare)
	return konn, direct, konn > 0 && direct > 0
}

// bareBehindHub is the bare proxy's and the hub's CPU per request in the
// hub-bare load: what the hub goal's ratio is for a proxy that adds
// nothing of its own behind the same hub.
func (r *report) bareBehindHub() (bare, hub time.Duration, ok bool) {
	bh := r.target("hub-bare")
	if bh == nil {
		return 0, 0, false
	}
	bare = bareProxyCPU(bh)
	hub, _ = bh.res.cpuPerReq("hub")
	return bare, hub, bare > 0 && hub > 0
}

// allocBudget is the in-process goal's bound on the handler's allocations
// per request beyond the bare proxy's (the benchmarks' allocs/op).
const allocBudget = 20

// sarLimit is what "≈ 0 SubjectAccessReviews per 1,000 requests" is taken
// to mean: at most one review per 1,000 requests, i.e. the cache answered
// 99.9% of them (one review per TTL per caller and attributes is expected).
const sarLimit = 1.0

// goBenchPair is the handler's and the bare proxy's ns/op and allocs/op
// medians for body (zeros without Go benchmarks).
func (r *report) goBenchPair(body string) (gwNs, bareNs, gwAllocs, bareAllocs float64) {
	gb := r.GoBench
	if gb == nil {
		return 0, 0, 0, 0
	}
	g, b := "BenchmarkProxyGateway/"+body, "BenchmarkBareReverseProxy/"+body
	return gb.median(g, nsOp), gb.median(b, nsOp), gb.median(g, allocsOp), gb.median(b, allocsOp)
}

// goalsSection is the table of the performance goals with the verdicts computed
// from this run.
func (r *report) goalsSection(b *strings.Builder) {
	gs := r.goals()
	met, judged := 0, 0
	for _, g := range gs {
		if g.Missing == "" && !g.Evidence {
			judged++
			if g.met() {
				met++
			}
		}
	}
	fmt.Fprintf(b, "## Goals\n\nEvery ratio below is computed from this run (sections 1, 2, 5, 6 and 7 have the measurements). Goals met: %d of the %d measured.\n\n", met, judged)
	b.WriteString("| goal | measured | met? |\n|---|---|---|\n")
	for _, g := range gs {
		name := g.Goal
		if g.Evidence {
			name += " (a check of the bench's own, not one of the goals)"
		}
		fmt.Fprintf(b, "| %s | %s | %s |\n", name, g.Measured, g.verdict())
	}
	b.WriteString("\nCPU per request is each process's CPU over a load divided by its requests (section 2). Each baseline is a bare reverse proxy in a process of its own, " +
		"as the gateway is: on a direct connection, over a konnectivity-client tunnel to the same proxy-server, and behind the same hub through an APIService of its own. " +
		"The in-process rows compare medians of benchmarks taken in turn (section 1). On shared CPUs a single run can land on either side of a bound that it is close to.")
	if len(r.Profiles) > 0 {
		b.WriteString(" The gateway is CPU-profiled during the first round of its profiled loads, which adds a little to its CPU there (`-gateway-profile ''` turns profiling off).")
	}
	b.WriteString("\n\n")
}
