package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/generated/clientset/versioned"
)

// isolationOptions shape the isolation section (-isolation-* flags).
type isolationOptions struct {
	Delay      time.Duration // added by the delaying proxy to everything the slow cluster sends
	Noisy      int           // workers saturating the slow cluster
	NoisyUsers int           // hub users they are spread over
	Rate       int           // steady requests per second to the other cluster
	Phase      time.Duration // steady load per phase
	Warm       time.Duration // noisy load before the steady one is measured
	InFlight   int           // the gateway's --max-requests-inflight in this section
	Rounds     int           // interleaved rounds of both phases
}

// The gateway metrics the section reads.
const (
	mFairInFlight = `cluster_gateway_fairness_inflight_requests{kind="request"}`
	mFairQueued   = `cluster_gateway_fairness_queued_requests{kind="request"}`
	mFairFull     = `cluster_gateway_fairness_rejected_requests_total{kind="request",reason="queue_full"}`
	mFairTimeout  = `cluster_gateway_fairness_rejected_requests_total{kind="request",reason="timeout"}`
	mActive       = "cluster_gateway_pool_active_streams"
	mTerminations = "apiserver_request_terminations_total{"
)

// isoConfig is one gateway configuration measured alone and with the neighbour.
type isoConfig struct {
	Name, Args    string
	Alone, Noisy  isoPhase
	FlagsOfConfig []string
}

// isoPhase accumulates the rounds of one phase.
type isoPhase struct {
	Steady                        steadyResult // through the gateway to the steady cluster
	Control                       steadyResult // the same load direct to its kube-apiserver, at the same time
	RoundP99, ControlP99          []time.Duration
	NoisyOK, Noisy429, NoisyOther int64
	FairFull, FairTimeout         float64 // limiter refusals during the steady load: queue full, wait ran out
	Global429                     float64 // the generic max-in-flight filter's 429s
	InFlight, Queued              float64 // limiter gauges at the end of the phase (last round)
	GatewayCPU, Elapsed           time.Duration
	CPU                           map[string]time.Duration // by process, over the steady load
	NoisyFirstEr                  string
}

type steadyResult struct {
	Sent, OK, TooMany, Other int
	Lat                      []time.Duration
	FirstErr                 string
}

func (s *steadyResult) add(r steadyResult) {
	s.Sent, s.OK, s.TooMany, s.Other = s.Sent+r.Sent, s.OK+r.OK, s.TooMany+r.TooMany, s.Other+r.Other
	s.Lat, s.FirstErr = append(s.Lat, r.Lat...), cmp.Or(s.FirstErr, r.FirstErr)
}

// Pct is the latency at quantile p of the sorted latencies.
func (s *steadyResult) Pct(p float64) time.Duration { return pct(s.Lat, p) }

type isolationResult struct {
	Opts                                  isolationOptions
	Rounds                                int
	SlowCluster, Steady                   string
	Configs                               []*isoConfig
	DelayedChunks                         int64
	SlowUpstream, Through, SteadyUpstream string
	Defaults                              map[string]string // the gateway's per-cluster flags and their defaults
}

// runIsolation makes one cluster slow (a ClusterGateway to managed-2 through
// a delaying forward proxy) and saturates it from many clients while a
// steady load runs on cluster-1, alone and with the neighbour in
// interleaved rounds, with the per-cluster limits at their defaults and
// then off. It restores the gateway's flags.
func runIsolation(ctx context.Context, s *session) (err error) {
	logf("isolation: a slow cluster saturated next to a steady one")
	env, o := s.env, s.o.Isolation
	res := &isolationResult{Opts: o, Rounds: o.Rounds, Steady: env.Managed[0].GatewayName, SlowCluster: "slow",
		SlowUpstream: env.Managed[1].Name, SteadyUpstream: env.Managed[0].Name}
	s.rep.Isolation = res
	if res.Defaults, err = flagDefaults(ctx, cmp.Or(env.GatewayBin, filepath.Join(env.BinDir, "cluster-gateway")),
		"max-requests-per-cluster", "max-queued-per-cluster", "queue-wait-timeout"); err != nil {
		return err
	}
	// Not system:masters, so the generic in-flight limit applies: steady first.
	names := []string{"steady"}
	for i := range o.NoisyUsers {
		names = append(names, fmt.Sprintf("noisy-%d", i))
	}
	users, err := newUsers(env, "bench-isolation:cluster-gateway:proxy", "cluster-gateway:proxy", names...)
	if err != nil {
		return err
	}
	px, err := env.StartDelayingProxy(o.Delay)
	if err != nil {
		return err
	}
	if err := createSlowGateway(ctx, env, res.SlowCluster, env.Managed[1], px.URL.String()); err != nil {
		return err
	}
	res.Through = px.URL.String()
	defer func() {
		logf("isolation: restarting the gateway with its earlier flags")
		err = cmp.Or(err, s.restartGateway(ctx, s.gatewayArgs))
	}()
	inflight := "--max-requests-inflight=" + strconv.Itoa(o.InFlight)
	res.Configs = []*isoConfig{
		{Name: "per-cluster limits (defaults)", FlagsOfConfig: []string{inflight}},
		{Name: "per-cluster limits off", FlagsOfConfig: []string{inflight, "--max-requests-per-cluster=0"}},
	}
	for _, c := range res.Configs {
		c.Args = strings.Join(c.FlagsOfConfig, " ")
		logf("isolation: gateway with %s", c.Args)
		if err := s.restartGateway(ctx, append(slices.Clone(s.gatewayArgs), c.FlagsOfConfig...)); err != nil {
			return err
		}
		if err := res.measure(ctx, s, c, users); err != nil {
			return err
		}
	}
	res.DelayedChunks = px.Delayed()
	return nil
}

// restartGateway restarts the environment's gateway with args.
func (s *session) restartGateway(ctx context.Context, args []string) error {
	defer s.gw.client.CloseIdleConnections() // its connection was to the old process
	if err := s.env.StopGateway(); err != nil {
		return fmt.Errorf("stop the gateway: %w", err)
	}
	if err := s.env.StartGateway(ctx, args); err != nil {
		return fmt.Errorf("start the gateway with %v: %w", args, err)
	}
	return nil
}

// measure runs the rounds of both phases on the gateway configured as c:
// the steady load (users[0]) and its control, alone and with the neighbour
// (the other users); alone first in even rounds, so that a drift in the
// machine's load falls on both alike.
func (res *isolationResult) measure(ctx context.Context, s *session, c *isoConfig, users []*localenv.User) error {
	env, o := s.env, res.Opts
	gwURL := func(cluster string) string {
		return s.env.Gateway.URL + gatewaysPath + cluster + "/proxy" + requestPath
	}
	m1, k := env.Managed[0], &kit{ctx: ctx}
	defer k.stop()
	// The steady load's client, then the neighbour's users' (for the warm-up only).
	var gwClients []*http.Client
	for _, u := range users {
		gwClients = append(gwClients, k.client(env.Gateway.CA.CertPEM, u.Cert))
	}
	control := k.client(m1.CA.CertPEM, m1.Admin)
	if err := k.err(); err != nil {
		return err
	}
	loads := []isoLoad{{gwClients[0], gwURL(res.Steady)}, {control, m1.URL + requestPath}}
	neighbour := func(ctx context.Context) (*noisyChild, error) {
		return startNoisy(ctx, env, users[1:], gwURL(res.SlowCluster), o.Noisy)
	}
	// Pool entries, connections and the hub's authorization answers first.
	if err := parallel(ctx, 2*len(gwClients), 2*len(gwClients), func(i int) error {
		url := []string{gwURL(res.Steady), gwURL(res.SlowCluster)}[i%2]
		if code, _, err := getCode(ctx, gwClients[i/2], url); err != nil || code != http.StatusOK {
			return fmt.Errorf("isolation warm-up GET %s: %d %v", url, code, err)
		}
		return nil
	}); err != nil {
		return err
	}
	for round := range res.Rounds {
		for i := range 2 {
			ph, nb, name := &c.Alone, neighbour, "alone"
			if (i+round)%2 == 1 {
				ph, name = &c.Noisy, "with the neighbour"
			} else {
				nb = nil
			}
			if err := isoRun(ctx, s.gw, env, ph, loads, nb, o); err != nil {
				return err
			}
			logf("isolation: %s, round %d/%d %s: p99 %s (control %s), %d steady 429s so far; neighbour %d ok, %d 429 so far",
				c.Name, round+1, res.Rounds, name, fmtDur(ph.RoundP99[round]), fmtDur(ph.ControlP99[round]), ph.Steady.TooMany, ph.NoisyOK, ph.Noisy429)
		}
	}
	for _, ph := range []*isoPhase{&c.Alone, &c.Noisy} {
		slices.Sort(ph.Steady.Lat)
		slices.Sort(ph.Control.Lat)
	}
	return nil
}

// isoLoad is a steady load's client and URL.
type isoLoad struct {
	client *http.Client
	url    string
}

// isoRun is one phase: the steady loads for o.Phase, after o.Warm of the
// neighbour when it is set (a process of its own, stopped after), then
// waits until the gateway holds nothing of the phase.
func isoRun(ctx context.Context, gw *gatewayAdmin, env *localenv.Env, ph *isoPhase, loads []isoLoad, neighbour func(context.Context) (*noisyChild, error), o isolationOptions) (err error) {
	var n *noisyChild
	if neighbour != nil {
		if n, err = neighbour(ctx); err != nil {
			return err
		}
		defer func() {
			if n != nil {
				err = errors.Join(err, n.stop())
			}
		}()
		if err := sleep(ctx, o.Warm); err != nil {
			return err
		}
	}
	if err := ph.measure(ctx, gw, env, n, loads, o); err != nil {
		return err
	}
	if n != nil {
		if err, n = n.stop(), nil; err != nil {
			return err
		}
	}
	// Still held after 30s is reported and the run goes on.
	var m map[string]float64
	held := errors.New("held")
	_, err = poll(ctx, 100*time.Millisecond, 30*time.Second, "drain", func(ctx context.Context) (err error) {
		if m, err = gw.metrics(ctx); err == nil && (m[mActive] != 0 || m[mFairInFlight] != 0 || m[mFairQueued] != 0) {
			return retry{held}
		}
		return err
	})
	if errors.Is(err, held) {
		logf("isolation: after the phase, %v leases, %v in flight and %v queued still held", m[mActive], m[mFairInFlight], m[mFairQueued])
		return nil
	}
	return err
}

// measure runs the steady loads once, with the neighbour n if not nil, and
// adds to ph their results, the limiter's and the in-flight filter's
// refusals, the neighbour's answers, and each process's and the machine's CPU.
func (ph *isoPhase) measure(ctx context.Context, gw *gatewayAdmin, env *localenv.Env, n *noisyChild, loads []isoLoad, o isolationOptions) (err error) {
	pids := map[string]int{"gateway": env.Gateway.Process.Pid(), "hub": env.Hub.Process.Pid(), "etcd": env.Etcd.Pid(),
		env.Managed[0].Name: env.Managed[0].Process.Pid(), env.Managed[1].Name: env.Managed[1].Process.Pid()}
	var n0, n1 noisyCounts
	if n != nil {
		if n0, err = n.counts(); err != nil {
			return err
		}
		pids["neighbour"] = n.Pid()
	}
	m0, err := gw.metrics(ctx)
	if err != nil {
		return err
	}
	machine0, err := machineCPU()
	if err != nil {
		return err
	}
	var rs [2]steadyResult
	cpu, err := cpuDuring(pids, func() error {
		start := time.Now()
		var lw sync.WaitGroup
		for i, l := range loads {
			lw.Go(func() { rs[i] = steadyLoad(ctx, l.client, l.url, o.Rate, o.Phase) })
		}
		lw.Wait()
		ph.Elapsed += time.Since(start)
		return nil
	})
	if err != nil {
		return err
	}
	machine1, err := machineCPU()
	cpu["machine"] = machine1 - machine0
	var m1 map[string]float64
	if err == nil {
		m1, err = gw.metrics(ctx)
	}
	if err == nil && n != nil {
		n1, err = n.counts()
		ph.NoisyOK, ph.Noisy429, ph.NoisyOther = ph.NoisyOK+n1.OK-n0.OK, ph.Noisy429+n1.TooMany-n0.TooMany, ph.NoisyOther+n1.Other-n0.Other
		ph.NoisyFirstEr = cmp.Or(ph.NoisyFirstEr, n1.FirstErr)
	}
	if err != nil {
		return err
	}
	ph.GatewayCPU += cpu["gateway"]
	ph.CPU = addCPU(ph.CPU, cpu)
	ph.FairFull += m1[mFairFull] - m0[mFairFull]
	ph.FairTimeout += m1[mFairTimeout] - m0[mFairTimeout]
	ph.Global429 += sumPrefix(m1, mTerminations, `code="429"`) - sumPrefix(m0, mTerminations, `code="429"`)
	ph.InFlight, ph.Queued = m1[mFairInFlight], m1[mFairQueued]
	ph.RoundP99 = append(ph.RoundP99, sortedPct(rs[0].Lat, .99))
	ph.ControlP99 = append(ph.ControlP99, sortedPct(rs[1].Lat, .99))
	ph.Steady.add(rs[0])
	ph.Control.add(rs[1])
	return nil
}

func sortedPct(lat []time.Duration, p float64) time.Duration {
	s := slices.Clone(lat)
	slices.Sort(s)
	return pct(s, p)
}

// noisyWorker GETs url in a loop and, on 429, waits as its Retry-After says
// (as client-go does). It starts at a random moment of the first second, as
// independent clients do, not all in lockstep.
func noisyWorker(ctx context.Context, c *http.Client, url string, ok, tooMany, other *atomic.Int64, firstErr *atomic.Value) {
	wait := rand.N(time.Second)
	for sleep(ctx, wait) == nil {
		code, retryAfter, err := getCode(ctx, c, url)
		switch wait = 0; {
		case ctx.Err() != nil:
			return
		case err == nil && code == http.StatusOK:
			ok.Add(1)
		case err == nil && code == http.StatusTooManyRequests:
			tooMany.Add(1)
			wait = time.Second
			if s, perr := strconv.Atoi(retryAfter); perr == nil && s > 0 {
				wait = time.Duration(s) * time.Second
			}
		default:
			other.Add(1)
			firstErr.CompareAndSwap(nil, fmt.Sprintf("%d %v", code, err))
			wait = 100 * time.Millisecond
		}
	}
}

// steadyLoad sends rate requests a second for d, each on its own schedule
// (open loop: a slow answer does not delay the next request).
func steadyLoad(ctx context.Context, c *http.Client, url string, rate int, d time.Duration) (r steadyResult) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	end := time.After(d)
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return r
		case <-end:
			wg.Wait()
			return r
		case <-tick.C:
		}
		r.Sent++
		wg.Go(func() {
			start := time.Now()
			code, _, err := getCode(ctx, c, url)
			lat := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && code == http.StatusOK:
				r.OK++
				r.Lat = append(r.Lat, lat)
				return
			case err == nil && code == http.StatusTooManyRequests:
				r.TooMany++
			default:
				r.Other++
			}
			r.FirstErr = cmp.Or(r.FirstErr, fmt.Sprintf("%d %v", code, err))
		})
	}
}

// getCode GETs url and returns the status code and Retry-After.
func getCode(ctx context.Context, c *http.Client, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After"), err
}

// sumPrefix sums the samples of one metric whose labels contain want.
func sumPrefix(m map[string]float64, prefix, want string) (s float64) {
	for k, v := range m {
		if strings.HasPrefix(k, prefix) && strings.Contains(k, want) {
			s += v
		}
	}
	return s
}

// createSlowGateway creates a ClusterGateway to managed cluster c through
// the forward proxy at proxyURL.
func createSlowGateway(ctx context.Context, env *localenv.Env, name string, c *localenv.Cluster, proxyURL string) error {
	cs, err := versioned.NewForConfig(env.Hub.RESTConfig())
	if err != nil {
		return err
	}
	gw := &gatewayv1alpha1.ClusterGateway{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: gatewayv1alpha1.ClusterGatewaySpec{
		Endpoint: gatewayv1alpha1.Endpoint{Type: gatewayv1alpha1.EndpointDirect, Address: c.URL, CABundle: c.CA.CertPEM, ProxyURL: proxyURL},
		Credential: gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialX509Certificate,
			X509: &gatewayv1alpha1.X509Credential{Certificate: c.GatewayUser.CertPEM, PrivateKey: c.GatewayUser.KeyPEM}},
	}}
	if _, err := cs.GatewayV1alpha1().ClusterGateways().Create(ctx, gw, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ClusterGateway %s: %w", name, err)
	}
	return nil
}

// flagDefaults reads the defaults of flags from bin --help.
func flagDefaults(ctx context.Context, bin string, flags ...string) (map[string]string, error) {
	out, err := exec.CommandContext(ctx, bin, "--help").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s --help: %w: %s", bin, err, out)
	}
	defaults := map[string]string{}
	for _, f := range flags {
		m := regexp.MustCompile(`(?s)--` + regexp.QuoteMeta(f) + ` \S+ .*?\(default ([^)]+)\)`).FindSubmatch(out)
		if m == nil {
			return nil, fmt.Errorf("%s --help shows no default for --%s", bin, f)
		}
		defaults[f] = string(m[1])
	}
	return defaults, nil
}

// The tables and figures of section 4 (report.md.tmpl).

// Phases are c's phases by name.
func (c *isoConfig) Phases() []struct {
	Name string
	P    *isoPhase
} {
	return []struct {
		Name string
		P    *isoPhase
	}{{"alone", &c.Alone}, {"with the neighbour", &c.Noisy}}
}

// CPUShare is role's CPU over the steady loads, in CPUs.
func (ph *isoPhase) CPUShare(role string) string {
	if cpu, ok := ph.CPU[role]; ok {
		return cpuShare(cpu, ph.Elapsed)
	}
	return "–"
}

// MedianP99 is the median of the rounds' p99s.
func (ph *isoPhase) MedianP99() time.Duration {
	var s []float64
	for _, d := range ph.RoundP99 {
		s = append(s, float64(d))
	}
	return time.Duration(medianOf(s))
}

// cpuShare is CPU time over wall time, in CPUs.
func cpuShare(cpu, wall time.Duration) string {
	if wall <= 0 {
		return "–"
	}
	return f2(cpu.Seconds() / wall.Seconds())
}
