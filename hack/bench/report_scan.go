package main

import (
	"fmt"
	"strings"
	"time"
)

// Tolerance of the "live heap after eviction" goal: the per-entry size is
// measured once (the pool filled, nothing evicted) and heap figures move by
// a few MiB between forced GCs (each is the median of settleSamples).
const scanHeapTolerance = 1.10

// scanSection is section 5 of the report: memory under a scan of more
// clusters than the pool holds, the memory goals, and how to size the
// pool.
func (r *report) scanSection(b *strings.Builder) {
	s := r.Scan
	perHeap, perRSS := s.perEntry()
	perStoredHeap := (s.Stored.Marked - s.Base.Marked) / float64(s.N)
	fmt.Fprintf(b, "## 5. Memory under a scan of more clusters than the pool holds\n\n")
	fmt.Fprintf(b, "The gateway restarted with the default pool (`--pool-capacity` %d; no pool flag among its arguments) and %d ClusterGateways stored "+
		"(alternately managed-1 and managed-2, distinct names; created and listed in %s; the stored row is read once the prober had probed each of them, %s later). "+
		"First %d of them get one GET each (the pool fills, nothing is evicted yet; the pooled row is read after one more round of probes, %s later, so that its connections have carried probes as well as a GET, like those the passes leave behind); "+
		"then %d passes each send one GET through the hub (`%s` of every cluster, via the aggregator and the gateway) for every gateway in turn, "+
		"with %d workers sharing one HTTP/2 client: a controller that lists something in every cluster, with %d× more clusters than the pool holds, "+
		"so nearly every request evicts an entry and dials a new connection. Peak RSS is VmHWM, reset before each pass (`/proc/<pid>/clear_refs`); "+
		"the \"(GC)\" columns are read right after a forced GC (`/debug/pprof/heap?gc=1`, whose profiles are saved in the state directory as `gateway-heap-scan-*.pprof`), %d times a second apart, the sample of median live heap kept (the prober's probes in flight at a GC move one sample by megabytes); "+
		"live heap is what the last GC marked (`go_gc_heap_live_bytes`); "+
		"heap alloc is `go_memstats_heap_alloc_bytes` (live plus what was allocated since the GC: the prober and in-flight requests keep allocating), "+
		"heap in use `go_memstats_heap_inuse_bytes` (also the free room of spans holding live objects); "+
		"the peak heap in use is the highest sampled once a second during the pass. The gateway binary: `%s`.\n\n",
		s.Capacity, s.N, s.CreateTime.Round(time.Second), s.ProbedWait.Round(time.Second), s.PooledN, s.PooledProbedWait.Round(time.Second), len(s.Passes), requestPath, s.Clients, s.N/s.Capacity, settleSamples, s.GatewayBin)

	b.WriteString("| gateway state | duration | errors | peak RSS | peak heap in use (sampled) | live heap (GC) | heap alloc (GC) | heap in use (GC) | RSS (GC) | pool entries | retiring | open connections | goroutines |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	row := func(name, dur, errs, peak, peakHeap string, g memState) {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %.0f | %.0f | %.0f | %.0f |\n", name, dur, errs, peak, peakHeap, mib(g.Marked), mib(g.Live), mib(g.Heap), mib(g.RSS), g.Entries, g.Retiring, g.OpenConns, g.Goroutines)
	}
	row("fresh gateway", "", "", "", "", s.Base)
	row(fmt.Sprintf("%d stored", s.N), "", "", "", "", s.Stored)
	row(fmt.Sprintf("%d pooled (one GET each)", s.PooledN), "", "", "", "", s.Pooled)
	for i, p := range s.Passes {
		row(fmt.Sprintf("after pass %d", i+1), p.Duration.Round(100*time.Millisecond).String(), fmt.Sprint(p.Errors), mib(p.PeakRSS), mib(p.PeakHeapSample), p.Settled)
	}
	row(fmt.Sprintf("%s after the last pass (no forced GC)", scanAfter), "", "", "", "", s.After)
	row(fmt.Sprintf("%s after the last pass, after a forced GC", scanAfter), "", "", "", "", s.AfterGC)
	settledName := fmt.Sprintf("RSS settled, %s after the last pass (no forced GC)", s.SettledAt.Round(time.Second))
	if !s.Stable {
		settledName = fmt.Sprintf("RSS still moving, %s after the last pass (no forced GC)", s.SettledAt.Round(time.Second))
	}
	row(settledName, "", "", "", "", s.Settled)
	b.WriteString("\n")
	if p := s.firstErr(); p != nil {
		fmt.Fprintf(b, "First request error: `%v`\n\n", p.FirstErr)
	}

	fmt.Fprintf(b, "- **Per pooled cluster** (pool entry, its transport and client key pair, and its one open HTTP/2 connection with its TLS state, buffers and read loop): "+
		"**%s live heap, %s RSS**: the %d pooled row less the stored row, per entry. Per stored ClusterGateway (its parsed form and credential in the informer cache, its health state): "+
		"%s live heap, the stored row less the fresh one.\n",
		kib(perHeap), kib(perRSS), s.PooledN, kib(perStoredHeap))

	// The memory goals are judged in the goals table (scanGoals); here what
	// they do not show.
	peak := s.peakRSS()
	fmt.Fprintf(b, "- Peak RSS (VmHWM) from the start to the first pass (creating, listing, filling the pool): %s; per pass as in the table.\n", mib(s.FillPeak))
	if peak > scanPeakRSSGoal {
		s.peakLimits(b)
	}
	if len(s.Passes) > 0 {
		var rs []string
		for _, p := range s.Passes {
			rs = append(rs, fmt.Sprintf("%.2f×", s.shareRatio(p.Settled)))
		}
		fmt.Fprintf(b, "- Live heap above the stored row over the pool's share (entries × %s), right after each pass (forced GC): %s.\n", kib(perHeap), strings.Join(rs, ", "))
	}
	b.WriteString("\n")
	if i := s.Idle; i.Window > 0 {
		profPath := idleProfileName
		if s.IdleProfile != nil {
			profPath = s.IdleProfile.Path
		}
		fmt.Fprintf(b, "Idle, with the %d gateways stored and no request (the %s from the forced GC %s after the scan until RSS settled): the gateway used %.2f of a CPU "+
			"while its prober, at its defaults, probed %.0f clusters a second. A probe of a cluster without a pooled connection dials it and makes a TLS handshake; "+
			"the prober's rate, and so its cost, follows clusters / `--probe-interval`. "+
			"Where that CPU goes: `go tool pprof %s` (the window's first %s, profiled).",
			s.N, i.Window.Round(time.Second), scanAfter, i.Cores, i.ProbesPerSec, profPath, scanIdleProfile)
		if i.ProbesPerSec > 0 {
			fmt.Fprintf(b, " Per probe: %s of CPU.", fmtDur(time.Duration(i.Cores/i.ProbesPerSec*float64(time.Second))))
		}
		b.WriteString("\n\n")
		if p := s.IdleProfile; p != nil {
			b.WriteString("Its top functions by their own CPU:\n\n")
			p.topBlock(b)
		}
	}
	for _, h := range []struct{ what, top string }{
		{fmt.Sprintf("the %d stored ClusterGateways (stored profile less the fresh gateway's)", s.N), s.HeapStored},
		{fmt.Sprintf("the %d pooled clusters (pooled profile less the stored one)", s.PooledN), s.HeapPooled},
		{fmt.Sprintf("what the passes left above the %d pooled row, %s after the scan (that profile less the pooled one: the pool's entries replaced by others, and what else the passes filled)", s.PooledN, scanAfter), s.HeapAfter},
	} {
		if h.top == "" {
			fmt.Fprintf(b, "Where the live heap of %s went: not available (pprof failed; the profiles are in the state directory).\n\n", h.what)
			continue
		}
		fmt.Fprintf(b, "Where the live heap of %s went (in-use space after a forced GC, `go tool pprof -top -sample_index=inuse_space -diff_base`):\n\n```\n%s\n```\n\n", h.what, h.top)
	}
	r.scanSizing(b, perHeap, perStoredHeap)
}

// scanSizing is the guidance on --pool-capacity, from this run's numbers.
func (r *report) scanSizing(b *strings.Builder, perHeap, perStoredHeap float64) {
	s := r.Scan
	baseRSS := s.Base.RSS
	estimate := func(capacity, gateways int) float64 {
		// Live heap of the pool and the store, doubled by the GC's default
		// goal (GOGC=100), on top of a fresh gateway's RSS.
		return baseRSS + 2*(float64(capacity)*perHeap+float64(gateways)*perStoredHeap)
	}
	b.WriteString("### Sizing `--pool-capacity`\n\n")
	fmt.Fprintf(b, "In this run each pooled cluster held %s of live heap (its entry, transport and client key pair, "+
		"and one open HTTP/2 connection after one small GET and a round of probes), and each stored ClusterGateway %s (its parsed form and credential in the informer cache, "+
		"its health state). With the default `GOGC=100` the Go runtime lets the heap grow to about twice the live heap before it collects, so estimate\n\n"+
		"    RSS ≈ %s + 2 × (capacity × %s + ClusterGateways × %s)\n\n"+
		"(%s: a fresh gateway here). For this run's %d entries and %d gateways that is %s; the measured peak RSS was %s. "+
		"For %d entries and %d gateways it is %s. ",
		kib(perHeap), kib(perStoredHeap), mib(baseRSS), kib(perHeap), kib(perStoredHeap), mib(baseRSS),
		s.Capacity, s.N, mib(estimate(s.Capacity, s.N)), mib(s.peakRSS()), 5000, s.N, mib(estimate(5000, s.N)))
	b.WriteString("Size the pool to the clusters used within `--pool-idle-ttl` if memory allows: a cluster that is evicted and used again pays a new TLS handshake " +
		"(through konnectivity, a new tunnel stream too), which the scan above pays on nearly every request. `GOMEMLIMIT` (the chart does not set it) " +
		"makes the runtime collect more often as the limit nears, instead of letting the heap reach twice the live heap.\n\n")
}

// perEntry is the heap and RSS per pooled cluster with an open connection.
func (s *scanResult) perEntry() (heap, rss float64) {
	if s.PooledN == 0 {
		return 0, 0
	}
	n := float64(s.PooledN)
	return (s.Pooled.Marked - s.Stored.Marked) / n, (s.Pooled.RSS - s.Stored.RSS) / n
}

func (s *scanResult) peakRSS() float64 {
	peak := s.FillPeak
	for _, p := range s.Passes {
		peak = max(peak, p.PeakRSS)
	}
	return peak
}

func (s *scanResult) firstErr() *scanPass {
	for i := range s.Passes {
		if s.Passes[i].FirstErr != nil {
			return &s.Passes[i]
		}
	}
	return nil
}

// shareRatio is g's live heap above the stored row over the pool's share
// (g's entries × the measured size per entry); 0 when nothing is pooled.
func (s *scanResult) shareRatio(g memState) float64 {
	perHeap, _ := s.perEntry()
	if share := perHeap * g.Entries; share > 0 {
		return (g.Marked - s.Stored.Marked) / share
	}
	return 0
}

// settleRatio is RSS scanAfter after the scan over the settled RSS; false
// when RSS did not settle.
func (s *scanResult) settleRatio() (float64, bool) {
	if s.Settled.RSS > 0 && s.Stable {
		return s.After.RSS / s.Settled.RSS, true
	}
	return 0, false
}

// scanGoals are the memory goals (a scan of 10,000 gateways), judged from the scan, for the
// goals table.
func (r *report) scanGoals() []goal {
	s := r.Scan
	const missing = "no scan in this run (-scan-gateways 0)"
	peak := goal{Goal: "Scan of 10,000 gateways, default pool: peak RSS ≤ 300 MB", Limit: scanPeakRSSGoal, Missing: missing}
	heap := goal{Goal: "Scan: live heap after eviction ≤ the pool's share (entries × measured size per entry, within 10%)", Limit: scanHeapTolerance, Missing: missing}
	settle := goal{Goal: "Scan: RSS one minute after ≤ 1.2× the settled RSS", Limit: 1.2, Missing: missing}
	if s != nil {
		peak.Missing, heap.Missing = "", ""
		peak.Value = s.peakRSS()
		peak.Measured = fmt.Sprintf("%s (%.0f MB) with %d gateways (section 5)", mib(peak.Value), peak.Value/1e6, s.N)
		if s.AfterGC.Entries > 0 {
			heap.Value = s.shareRatio(s.AfterGC)
			heap.Measured = fmt.Sprintf("%.2f× (%s above the stored gateways for %.0f entries)", heap.Value, mib(s.AfterGC.Marked-s.Stored.Marked), s.AfterGC.Entries)
		} else {
			heap.Missing = "the pool was empty after the scan"
		}
		if rr, ok := s.settleRatio(); ok {
			settle.Missing, settle.Value = "", rr
			settle.Measured = fmt.Sprintf("%.2f× (%s vs %s)", rr, mib(s.After.RSS), mib(s.Settled.RSS))
		} else {
			settle.Missing = "RSS had not settled by the end of the scan section"
		}
	}
	return []goal{peak, heap, settle}
}

// peakLimits says, from this run's figures, what the peak RSS is made of:
// the heap between collections, and what a fresh gateway holds outside it.
func (s *scanResult) peakLimits(b *strings.Builder) {
	var peakHeap, live float64
	for _, p := range s.Passes {
		peakHeap = max(peakHeap, p.PeakHeapSample)
		live = max(live, p.Settled.Marked)
	}
	if peakHeap == 0 || live == 0 {
		return
	}
	outside := s.Base.RSS - s.Base.Heap
	fmt.Fprintf(b, "- What limits the peak RSS goal: during the passes the heap in use peaked at %s (sampled), %.1f× the live heap after a pass (%s, of which %s the stored gateways "+
		"and %s the pool; the profiles below say what they hold). With the default `GOGC=100` the runtime lets the heap grow to twice the live heap before "+
		"it collects, and spans of freed objects stay in use until their last object is freed. Outside the heap, a fresh gateway already holds %s of RSS "+
		"(%s RSS less %s heap in use; %s of its RSS is mapped from the binary's file: code and data) plus a goroutine stack per open connection. "+
		"Reaching 300 MB needs a smaller live heap or a lower heap goal (`GOGC`, or `GOMEMLIMIT` at the memory limit, which trades CPU for memory).\n",
		mib(peakHeap), peakHeap/live, mib(live), mib(s.Stored.Marked-s.Base.Marked), mib(live-s.Stored.Marked),
		mib(outside), mib(s.Base.RSS), mib(s.Base.Heap), mib(s.Base.RSSFile))
}
