package main

import (
	"fmt"
	"strings"
	"time"
)

// watchMemGoal bounds the gateway's live memory per idle watch over the
// bare proxy's.
const watchMemGoal = 1.2

// live is the memory a process holds for its goroutines and objects: the
// Go heap and goroutine stacks in use. The goal is judged on it rather than
// on RSS: a process that allocates a buffer from pages it never used before
// has only the pages it wrote resident, one that reuses freed memory has
// all of them, so RSS per watch depends on the process's history as much
// as on what it holds (section 7 shows both).
func (a memSample) live() float64 { return a.Heap + a.Stacks }

// watchGoals is the watches section's goal.
func (r *report) watchGoals() []goal {
	g := goal{Goal: fmt.Sprintf("Idle watches through the gateway port: memory per watch (Go heap + goroutine stacks) ≤ %.1f× the bare proxy's", watchMemGoal), Limit: watchMemGoal}
	gw, bare := r.Watches.holder("gateway"), r.Watches.holder("bare")
	switch {
	case gw == nil || bare == nil:
		g.Missing = "no watches in this run (-watches 0, or -only another section)"
	case bare.perWatch().live() <= 0:
		g.Missing = "the bare proxies' memory did not grow with the watches"
	default:
		gp, bp := gw.perWatch(), bare.perWatch()
		g.Value = gp.live() / bp.live()
		g.Measured = fmt.Sprintf("%.2f× (%s vs %s per watch, %d watches; RSS %.2f×: %s vs %s, section 7)", g.Value, kib(gp.live()), kib(bp.live()), gw.Watches,
			gp.RSS/bp.RSS, kib(gp.RSS), kib(bp.RSS))
	}
	return []goal{g}
}

// watchesSection is section 7.
func (r *report) watchesSection(b *strings.Builder) {
	s := r.Watches
	fmt.Fprintf(b, "## 7. Idle watches\n\n")
	fmt.Fprintf(b, "%d watches of ConfigMaps in one namespace, opened %d at a time from hack/bench, spread evenly over %d hub users (a client each, as separate programs would be) "+
		"and the %d Direct managed clusters, held idle at once: first through the gateway's port (restarted with `--max-streams-per-cluster` and `--max-streams-per-user-per-cluster` "+
		"raised to the watches per cluster, so that its limiter admits them all), then, after those ended, through bare reverse proxies (one process per cluster, each the baseline of the "+
		"other sections, with as many clients). Memory is read after a forced GC, before the first watch and once all are open (a watch is open when its answer's headers arrived, "+
		"which kube-apiserver sends once the watch is registered): RSS from /proc, the Go heap in use and the goroutines from the gateway's /metrics and the bare proxies' runtime. "+
		"Then one ConfigMap is created in the namespace on each cluster, and the time runs until every watch has read its event. `-watches` sets the count (10,000 for `make bench`).\n\n",
		s.N, *watchOpeners, s.Users, s.Clusters)
	b.WriteString("| held by | watches | to open all | RSS before → with them | RSS per watch | Go heap per watch | goroutine stacks per watch | goroutines per watch | one event to all |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, h := range s.Holders {
		p := h.perWatch()
		fmt.Fprintf(b, "| %s | %d | %s | %s → %s | %s | %s | %s | %.2f | %s |\n", h.Name, h.Watches, h.Open.Round(time.Millisecond),
			mib(h.Before.RSS), mib(h.After.RSS), kib(p.RSS), kib(p.Heap), kib(p.Stacks), p.Goroutines, h.Deliver.Round(time.Millisecond))
	}
	b.WriteString("\n")
	gw, bare := s.holder("gateway"), s.holder("bare")
	if gw != nil && bare != nil {
		gp, bp := gw.perWatch(), bare.perWatch()
		fmt.Fprintf(b, "Per watch the gateway holds %.2f× the bare proxies' Go heap + stacks (%s vs %s), %.2f× their RSS and %.2f× their goroutines (%.2f vs %.2f); "+
			"one event reached all watches in %s through the gateway and %s through the bare proxies. ",
			gp.live()/bp.live(), kib(gp.live()), kib(bp.live()), gp.RSS/bp.RSS, gp.Goroutines/bp.Goroutines, gp.Goroutines, bp.Goroutines,
			gw.Deliver.Round(time.Millisecond), bare.Deliver.Round(time.Millisecond))
		b.WriteString("Both keep a watch as one HTTP/2 stream from the client and one to the cluster, each with net/http's goroutines, and a body-copy buffer that the watch holds while it waits: " +
			"httputil.ReverseProxy's 32 KiB in the bare proxy, 8 KiB in the gateway (pkg/proxy's watch buffers). ")
		if bp.RSS < bp.live() {
			fmt.Fprintf(b, "The bare proxies' RSS per watch is below their heap + stacks (%s vs %s): each of their watches allocates a fresh 32 KiB buffer from pages never used before, "+
				"of which an idle watch has written only the first, so the rest is not resident yet; the gateway reuses memory that its requests had freed, which is resident. "+
				"Once watches are re-opened (kube-apiserver ends each within its watch timeout, and clients re-watch), reused buffers are resident in any proxy: "+
				"heap + stacks is what a watch holds, and what the goal compares.", kib(bp.RSS), kib(bp.live()))
		}
		b.WriteString("\n\n")
	}
	if s.HeapTop != "" {
		fmt.Fprintf(b, "What the gateway's in-use heap grew by with the watches (`go tool pprof -sample_index=inuse_space -diff_base %s %s`):\n\n```\n%s\n```\n\n",
			watchHeapPath(r.Opts, "before"), watchHeapPath(r.Opts, "after"), s.HeapTop)
	}
	var limits []string
	for _, a := range s.GatewayArgs {
		if strings.HasPrefix(a, "--max-streams") {
			limits = append(limits, a)
		}
	}
	fmt.Fprintf(b, "The gateway's stream limits in this section: `%s`\n\n", strings.Join(limits, " "))
}
