package main

import (
	"fmt"
	"strings"
	"time"
)

// watchMemGoal bounds the gateway's RSS per idle watch over the bare proxy's.
const watchMemGoal = 1.2

// watchGoals is the watches section's goal.
func (r *report) watchGoals() []goal {
	g := goal{Goal: fmt.Sprintf("Idle watches through the gateway port: RSS per watch ≤ %.1f× the bare proxy's", watchMemGoal), Limit: watchMemGoal}
	gw, bare := r.Watches.holder("gateway"), r.Watches.holder("bare")
	switch {
	case gw == nil || bare == nil:
		g.Missing = "no watches in this run (-watches 0, or -only another section)"
	case bare.perWatch().RSS <= 0:
		g.Missing = "the bare proxies' RSS did not grow with the watches"
	default:
		gp, bp := gw.perWatch(), bare.perWatch()
		g.Value = gp.RSS / bp.RSS
		g.Measured = fmt.Sprintf("%.2f× (%s vs %s per watch, %d watches; Go heap %.2f×: %s vs %s)", g.Value, kib(gp.RSS), kib(bp.RSS), gw.Watches,
			gp.Heap/bp.Heap, kib(gp.Heap), kib(bp.Heap))
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
		fmt.Fprintf(b, "Per watch the gateway holds %.2f× the bare proxies' RSS, %.2f× their Go heap and %.2f× their goroutines (%.2f vs %.2f); "+
			"one event reached all watches in %s through the gateway and %s through the bare proxies. ",
			gp.RSS/bp.RSS, gp.Heap/bp.Heap, gp.Goroutines/bp.Goroutines, gp.Goroutines, bp.Goroutines, gw.Deliver.Round(time.Millisecond), bare.Deliver.Round(time.Millisecond))
		b.WriteString("Both keep a watch as one HTTP/2 stream from the client and one to the cluster; the goroutines are net/http's per stream on each side and the proxy's own.\n\n")
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
