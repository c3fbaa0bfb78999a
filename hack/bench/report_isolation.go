package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

func (r *report) isolationSection(b *strings.Builder) {
	res, o := r.Isolation, r.Isolation.Opts
	d := res.Defaults
	fmt.Fprintf(b, "## 4. Isolation: a slow, saturated cluster next to a steady one\n\n")
	fmt.Fprintf(b, "ClusterGateway `%s` reaches %s through a delaying HTTP CONNECT proxy (hack/localenv `StartDelayingProxy`) that hands on everything the cluster sends %s after it arrived: "+
		"every request to it takes at least that long, as on a far or overloaded cluster. %d noisy workers in a process of their own (another tenant's clients), spread over %d hub users, GET `%s` through it in a loop from a random start within the first second and, on a 429, wait as its Retry-After says (as client-go does). "+
		"Meanwhile a steady open-loop load of %d requests/s, as one more user, GETs the same object of `%s` (Direct), and, as a control for this machine's own noise, as many go straight to its kube-apiserver (%s) at the same time. "+
		"The gateway's clients call its own port with client certificates of hub users that are not in system:masters, so the generic server's in-flight limit applies to them; "+
		"this section runs the gateway with `--max-requests-inflight=%d`, small enough for the noisy workers to exhaust. "+
		"Each of %d rounds measures the steady loads for %s alone and for %s with the neighbour (after %s of noisy load alone), alone first in odd rounds and the neighbour first in even ones. The gateway runs first with the per-cluster limits at their defaults "+
		"(`--max-requests-per-cluster=%s --max-queued-per-cluster=%s --queue-wait-timeout=%s`, read from its `--help`), then restarted with `--max-requests-per-cluster=0` (no per-cluster bound).\n\n",
		res.SlowCluster, res.SlowUpstream, o.Delay, o.Noisy, o.NoisyUsers, requestPath, o.Rate, res.Steady, res.SteadyUpstream, o.InFlight,
		res.Rounds, o.Phase, o.Phase, o.Warm, d["max-requests-per-cluster"], d["max-queued-per-cluster"], d["queue-wait-timeout"])

	b.WriteString("| gateway | steady load | sent | 200 | 429 | other errors | p50 | p99 | p99 by round | control (direct) p99 | control p99 by round |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range res.Configs {
		for _, row := range []struct {
			name string
			ph   *isoPhase
		}{{"alone", &c.Alone}, {"with the neighbour", &c.Noisy}} {
			s := &row.ph.Steady
			fmt.Fprintf(b, "| %s | %s | %d | %d | %d | %d | %s | %s | %s | %s | %s |\n", c.Name, row.name, s.Sent, s.OK, s.TooMany, s.Other,
				fmtDur(s.pct(.5)), fmtDur(s.pct(.99)), durList(row.ph.RoundP99), fmtDur(row.ph.Control.pct(.99)), durList(row.ph.ControlP99))
		}
	}
	b.WriteString("\n| gateway | neighbour 200 / 429 / other | limiter 429s: queue full / wait timeout | generic in-flight 429s | limiter in flight / queued at the end | gateway CPU alone → with the neighbour |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|\n")
	for _, c := range res.Configs {
		n := &c.Noisy
		fmt.Fprintf(b, "| %s | %d / %d / %d | %.0f / %.0f | %.0f | %.0f / %.0f | %s → %s |\n", c.Name, n.NoisyOK, n.Noisy429, n.NoisyOther,
			n.FairFull, n.FairTimeout, n.Global429, n.InFlight, n.Queued, cpuShare(c.Alone.GatewayCPU, c.Alone.Elapsed), cpuShare(n.GatewayCPU, n.Elapsed))
	}
	roles := []string{"machine", "gateway", "bench", "neighbour", "hub", "etcd", res.SteadyUpstream, res.SlowUpstream}
	fmt.Fprintf(b, "\nCPU over the steady loads, in CPUs (CPU time over wall time, both summed over the rounds): `machine` is the busy time of the whole machine from /proc/stat (user, nice, system, irq and softirq; this machine's other work included), "+
		"the other columns one process each, utime+stime from /proc/<pid>/stat: `bench` is this process (the steady and control clients, the delaying proxy that carries the neighbour's traffic to %s, the metric scrapes), "+
		"`neighbour` the child process of the noisy workers (it runs only in the phases with the neighbour), then the hub's kube-apiserver, etcd and the two managed kube-apiservers. "+
		"The environment's other processes (the Konnectivity cluster's kube-apiserver, proxy-server and agent) are in `machine` only.\n\n| gateway | phase |", res.SlowUpstream)
	for _, r := range roles {
		fmt.Fprintf(b, " %s |", r)
	}
	b.WriteString("\n|---|---|" + strings.Repeat("---:|", len(roles)) + "\n")
	for _, c := range res.Configs {
		for _, row := range []struct {
			name string
			ph   *isoPhase
		}{{"alone", &c.Alone}, {"with the neighbour", &c.Noisy}} {
			fmt.Fprintf(b, "| %s | %s |", c.Name, row.name)
			for _, r := range roles {
				if cpu, ok := row.ph.CPU[r]; ok {
					fmt.Fprintf(b, " %s |", cpuShare(cpu, row.ph.Elapsed))
				} else {
					b.WriteString(" – |")
				}
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\nThe steady load's p50 and p99 are over its 200s in all rounds; `p99 by round` shows the spread. " +
		"The control bypasses the gateway: where its p99 rises with the steady load's, the cause is the CPUs (this machine's other work, or the neighbour's clients and 429s competing for them), not a shared resource inside the gateway. " +
		"The neighbour's counts are over the same time as the steady load. ")
	b.WriteString("The 429s of the limiter and of the generic filter are deltas of `cluster_gateway_fairness_rejected_requests_total` and `apiserver_request_terminations_total{code=\"429\"}`; ")
	b.WriteString("gateway CPU is its utime+stime over the steady load, in CPUs. ")
	fmt.Fprintf(b, "%d response chunks of the slow cluster went through the delay line.\n\n", res.DelayedChunks)
	for _, c := range res.Configs {
		if s := c.Noisy.Steady.FirstErr; s != "" {
			fmt.Fprintf(b, "- First error of the steady load with the neighbour, %s: `%s`\n", c.Name, s)
		}
		if s := c.Noisy.NoisyFirstEr; s != "" {
			fmt.Fprintf(b, "- First non-429 error of the neighbour, %s: `%s`\n", c.Name, s)
		}
	}
	if on := res.Configs[0]; on.Alone.Steady.OK > 0 && on.Noisy.Steady.OK > 0 {
		alone, with := on.Alone.Steady.pct(.99), on.Noisy.Steady.pct(.99)
		verdict := "within"
		if float64(with) > 2*float64(alone) {
			verdict = "not within"
		}
		fmt.Fprintf(b, "\n**With the per-cluster limits at their defaults, `%s`'s p99 is %s alone and %s next to the saturated `%s`: %.2f×, %s the 2× goal** "+
			"(the control, straight to the kube-apiserver: %s and %s, %.2f×; the median of the rounds' p99s: %s alone and %s with the neighbour). "+
			"The steady load got %d 429s and %d other errors among %d requests; the neighbour got %d 429s (%.0f for a full queue, %.0f for a wait that ran out) and %d answers.\n",
			res.Steady, fmtDur(alone), fmtDur(with), res.SlowCluster, ratio(with, alone), verdict,
			fmtDur(on.Alone.Control.pct(.99)), fmtDur(on.Noisy.Control.pct(.99)), ratio(on.Noisy.Control.pct(.99), on.Alone.Control.pct(.99)),
			fmtDur(median(on.Alone.RoundP99)), fmtDur(median(on.Noisy.RoundP99)),
			on.Noisy.Steady.TooMany, on.Noisy.Steady.Other, on.Noisy.Steady.Sent, on.Noisy.Noisy429, on.Noisy.FairFull, on.Noisy.FairTimeout, on.Noisy.NoisyOK)
	}
	if len(res.Configs) > 1 {
		off := res.Configs[1]
		fmt.Fprintf(b, "\nWithout a per-cluster bound the same neighbour takes the generic in-flight slots: the steady load got %d 429s (%.0f from the generic filter in all) and %d other errors among %d requests, p99 of its 200s %s (alone: %s).\n",
			off.Noisy.Steady.TooMany, off.Noisy.Global429, off.Noisy.Steady.Other, off.Noisy.Steady.Sent, fmtDur(off.Noisy.Steady.pct(.99)), fmtDur(off.Alone.Steady.pct(.99)))
	}
	b.WriteString("\n")
}

func durList(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, fmtDur(d))
	}
	return strings.Join(s, " / ")
}

// cpuShare is CPU time over wall time, in CPUs.
func cpuShare(cpu, wall time.Duration) string {
	if wall <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", cpu.Seconds()/wall.Seconds())
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
