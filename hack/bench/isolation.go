package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
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
	"k8s.io/apimachinery/pkg/util/wait"

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
	Steady       steadyResult // through the gateway to the steady cluster
	Control      steadyResult // the same load direct to that cluster's kube-apiserver, at the same time
	RoundP99     []time.Duration
	ControlP99   []time.Duration
	NoisyOK      int64
	Noisy429     int64
	NoisyOther   int64
	FairFull     float64 // limiter refusals (queue full) during the steady load
	FairTimeout  float64 // limiter refusals (wait ran out)
	Global429    float64 // the generic max-in-flight filter's 429s
	InFlight     float64 // limiter gauges at the end of the phase (last round)
	Queued       float64
	GatewayCPU   time.Duration
	CPU          map[string]time.Duration // by process, over the steady load
	Elapsed      time.Duration
	NoisyFirstEr string
}

type steadyResult struct {
	Sent, OK, TooMany, Other int
	Lat                      []time.Duration
	FirstErr                 string
}

func (s *steadyResult) add(r steadyResult) {
	s.Sent += r.Sent
	s.OK += r.OK
	s.TooMany += r.TooMany
	s.Other += r.Other
	s.Lat = append(s.Lat, r.Lat...)
	if s.FirstErr == "" {
		s.FirstErr = r.FirstErr
	}
}

func (s *steadyResult) pct(p float64) time.Duration {
	if len(s.Lat) == 0 {
		return 0
	}
	return s.Lat[min(len(s.Lat)-1, int(float64(len(s.Lat))*p))]
}

type isolationResult struct {
	Opts                  isolationOptions
	Rounds                int
	SlowCluster, Steady   string
	Configs               []*isoConfig
	DelayedChunks         int64
	SlowUpstream, Through string
	SteadyUpstream        string
	Defaults              map[string]string // the gateway's per-cluster flags and their defaults
}

// runIsolation makes one cluster slow (a ClusterGateway to managed-2 through
// a delaying forward proxy) and saturates it from many clients, while a
// steady load runs on cluster-1; the steady load's latency is measured alone
// and with the neighbour, in interleaved rounds, with the per-cluster limits
// at their defaults and then switched off. It restores the gateway's flags.
func runIsolation(ctx context.Context, env *localenv.Env, gw *gatewayAdmin, o isolationOptions, baseArgs []string) (res *isolationResult, err error) {
	rounds := o.Rounds
	restart := func(args []string) error {
		defer gw.client.CloseIdleConnections() // its connection was to the old process
		return restartGateway(ctx, env, args)
	}
	res = &isolationResult{Opts: o, Rounds: rounds, Steady: env.Managed[0].GatewayName, SlowCluster: "slow"}
	bin := env.GatewayBin
	if bin == "" {
		bin = filepath.Join(env.BinDir, "cluster-gateway")
	}
	if res.Defaults, err = flagDefaults(ctx, bin,
		"max-requests-per-cluster", "max-queued-per-cluster", "queue-wait-timeout"); err != nil {
		return nil, err
	}
	users, err := isolationUsers(env, o.NoisyUsers)
	if err != nil {
		return nil, err
	}
	px, err := env.StartDelayingProxy(o.Delay)
	if err != nil {
		return nil, err
	}
	if err := createSlowGateway(ctx, env, res.SlowCluster, env.Managed[1], px.URL.String()); err != nil {
		return nil, err
	}
	res.SlowUpstream, res.Through, res.SteadyUpstream = env.Managed[1].Name, px.URL.String(), env.Managed[0].Name
	defer func() {
		logf("isolation: restarting the gateway with its earlier flags")
		if rerr := restart(baseArgs); rerr != nil && err == nil {
			err = rerr
		}
	}()

	inflight := "--max-requests-inflight=" + strconv.Itoa(o.InFlight)
	res.Configs = []*isoConfig{
		{Name: "per-cluster limits (defaults)", FlagsOfConfig: []string{inflight}},
		{Name: "per-cluster limits off", FlagsOfConfig: []string{inflight, "--max-requests-per-cluster=0"}},
	}
	gwURL := func(cluster string) string {
		return env.Gateway.URL + "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/" + cluster + "/proxy" + requestPath
	}
	for _, c := range res.Configs {
		c.Args = strings.Join(c.FlagsOfConfig, " ")
		logf("isolation: gateway with %s", c.Args)
		if err := restart(append(append([]string{}, baseArgs...), c.FlagsOfConfig...)); err != nil {
			return nil, err
		}
		steady, err := mtlsClient(env.Gateway.CA.CertPEM, users[0].Cert)
		if err != nil {
			return nil, err
		}
		m1 := env.Managed[0]
		control, err := mtlsClient(m1.CA.CertPEM, m1.Admin)
		if err != nil {
			return nil, err
		}
		loads := []isoLoad{{steady, gwURL(res.Steady)}, {control, m1.URL + requestPath}}
		noisy := make([]*http.Client, 0, o.NoisyUsers) // for the warm-up only
		for _, u := range users[1:] {
			cl, err := mtlsClient(env.Gateway.CA.CertPEM, u.Cert)
			if err != nil {
				return nil, err
			}
			noisy = append(noisy, cl)
		}
		neighbour := func(ctx context.Context) (*noisyChild, error) {
			return startNoisy(ctx, env, users[1:], gwURL(res.SlowCluster), o.Noisy)
		}
		// Pool entries, connections and the hub's authorization answers first.
		clients := append([]*http.Client{steady, control}, noisy...)
		if err := parallel(ctx, 2*len(clients), 2*len(clients), func(i int) error {
			if clients[i/2] == control {
				return nil
			}
			url := []string{gwURL(res.Steady), gwURL(res.SlowCluster)}[i%2]
			if code, _, err := getCode(ctx, clients[i/2], url); err != nil || code != http.StatusOK {
				return fmt.Errorf("isolation warm-up GET %s: %d %v", url, code, err)
			}
			return nil
		}); err != nil {
			return nil, err
		}
		for round := range rounds {
			alone := func() error {
				if err := isoRun(ctx, gw, env, &c.Alone, loads, nil, o); err != nil {
					return err
				}
				logf("isolation: %s, round %d/%d alone: p99 %s (control %s)", c.Name, round+1, rounds, fmtDur(c.Alone.RoundP99[round]), fmtDur(c.Alone.ControlP99[round]))
				return nil
			}
			with := func() error {
				if err := isoRun(ctx, gw, env, &c.Noisy, loads, neighbour, o); err != nil {
					return err
				}
				logf("isolation: %s, round %d/%d with the neighbour: p99 %s (control %s), %d steady 429s so far; neighbour %d ok, %d 429 so far",
					c.Name, round+1, rounds, fmtDur(c.Noisy.RoundP99[round]), fmtDur(c.Noisy.ControlP99[round]), c.Noisy.Steady.TooMany, c.Noisy.NoisyOK, c.Noisy.Noisy429)
				return nil
			}
			// Alone first in even rounds, the neighbour first in odd ones:
			// a drift in the machine's load falls on both alike.
			order := []func() error{alone, with}
			if round%2 == 1 {
				order = []func() error{with, alone}
			}
			for _, phase := range order {
				if err := phase(); err != nil {
					return nil, err
				}
			}
		}
		for _, cl := range clients {
			cl.CloseIdleConnections()
		}
		for _, ph := range []*isoPhase{&c.Alone, &c.Noisy} {
			slices.Sort(ph.Steady.Lat)
			slices.Sort(ph.Control.Lat)
		}
	}
	res.DelayedChunks = px.Delayed()
	return res, nil
}

func sortedPct(lat []time.Duration, p float64) time.Duration {
	s := slices.Clone(lat)
	slices.Sort(s)
	r := steadyResult{Lat: s}
	return r.pct(p)
}

// isoLoad is a steady load's client and URL.
type isoLoad struct {
	client *http.Client
	url    string
}

// isoRun is one phase: the steady loads (through the gateway, and the
// control direct to the cluster) for o.Phase at once, with the noisy
// neighbour (a process of its own) saturating the slow cluster first when
// neighbour is set, then stopped and drained again.
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
		select {
		case <-time.After(o.Warm):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var n0 noisyCounts
	if n != nil {
		if n0, err = n.counts(); err != nil {
			return err
		}
	}
	m0, err := gw.metrics(ctx)
	if err != nil {
		return err
	}
	pid := env.Gateway.Process.Pid()
	pids := map[string]int{"gateway": pid, "hub": env.Hub.Process.Pid(), "etcd": env.Etcd.Pid(),
		env.Managed[0].Name: env.Managed[0].Process.Pid(), env.Managed[1].Name: env.Managed[1].Process.Pid()}
	if n != nil {
		pids["neighbour"] = n.Pid()
	}
	cpu0, err := cpuOf(pids)
	if err != nil {
		return err
	}
	if cpu0["machine"], err = machineCPU(); err != nil {
		return err
	}
	start := time.Now()
	var rs [2]steadyResult
	var lw sync.WaitGroup
	for i, l := range loads {
		lw.Add(1)
		go func() { defer lw.Done(); rs[i] = steadyLoad(ctx, l.client, l.url, o.Rate, o.Phase) }()
	}
	lw.Wait()
	ph.Elapsed += time.Since(start)
	cpu1, err := cpuOf(pids)
	if err != nil {
		return err
	}
	if cpu1["machine"], err = machineCPU(); err != nil {
		return err
	}
	m1, err := gw.metrics(ctx)
	if err != nil {
		return err
	}
	ph.GatewayCPU += cpu1["gateway"] - cpu0["gateway"]
	if ph.CPU == nil {
		ph.CPU = map[string]time.Duration{}
	}
	for role := range cpu1 {
		ph.CPU[role] += cpu1[role] - cpu0[role]
	}
	if n != nil {
		n1, err := n.counts()
		if err != nil {
			return err
		}
		ph.NoisyOK += n1.OK - n0.OK
		ph.Noisy429 += n1.TooMany - n0.TooMany
		ph.NoisyOther += n1.Other - n0.Other
		if ph.NoisyFirstEr == "" {
			ph.NoisyFirstEr = n1.FirstErr
		}
	}
	ph.FairFull += m1[mFairFull] - m0[mFairFull]
	ph.FairTimeout += m1[mFairTimeout] - m0[mFairTimeout]
	ph.Global429 += sumPrefix(m1, mTerminations, `code="429"`) - sumPrefix(m0, mTerminations, `code="429"`)
	ph.InFlight, ph.Queued = m1[mFairInFlight], m1[mFairQueued]
	ph.RoundP99 = append(ph.RoundP99, sortedPct(rs[0].Lat, .99))
	ph.ControlP99 = append(ph.ControlP99, sortedPct(rs[1].Lat, .99))
	ph.Steady.add(rs[0])
	ph.Control.add(rs[1])

	if n != nil {
		err, n = n.stop(), nil
		if err != nil {
			return err
		}
	}
	// The next phase starts with nothing of this one still held.
	// Still held after 30s is reported and the run goes on.
	var m map[string]float64
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		if m, err = gw.metrics(ctx); err != nil {
			return false, err
		}
		return m[mActive] == 0 && m[mFairInFlight] == 0 && m[mFairQueued] == 0, nil
	})
	if wait.Interrupted(err) && ctx.Err() == nil {
		logf("isolation: after the phase, %v leases, %v in flight and %v queued still held", m[mActive], m[mFairInFlight], m[mFairQueued])
		return nil
	}
	return err
}

// noisyWorker GETs url in a loop and, on 429, waits as its Retry-After says
// (as client-go does) before trying again. It starts at a random moment of
// the first second, as independent clients do: started all at once, the
// workers would be refused and retry in lockstep, one burst a second.
func noisyWorker(ctx context.Context, c *http.Client, url string, ok, tooMany, other *atomic.Int64, firstErr *atomic.Value) {
	select {
	case <-time.After(rand.N(time.Second)):
	case <-ctx.Done():
		return
	}
	for ctx.Err() == nil {
		code, retryAfter, err := getCode(ctx, c, url)
		var wait time.Duration
		switch {
		case ctx.Err() != nil:
			return
		case err == nil && code == http.StatusOK:
			ok.Add(1)
			continue
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
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return
		}
	}
}

// steadyLoad sends rate requests a second for d, each on its own schedule
// (open loop: a slow answer does not delay the next request).
func steadyLoad(ctx context.Context, c *http.Client, url string, rate int, d time.Duration) steadyResult {
	var mu sync.Mutex
	var r steadyResult
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
		wg.Add(1)
		go func() {
			defer wg.Done()
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
			if r.FirstErr == "" {
				r.FirstErr = fmt.Sprintf("%d %v", code, err)
			}
		}()
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
func sumPrefix(m map[string]float64, prefix, want string) float64 {
	var s float64
	for k, v := range m {
		if strings.HasPrefix(k, prefix) && strings.Contains(k, want) {
			s += v
		}
	}
	return s
}

// isolationUsers issues hub users (not system:masters, so the gateway's
// generic in-flight limit applies to them) allowed to use the proxy:
// "steady" first, then noisy-0, noisy-1, ...
func isolationUsers(env *localenv.Env, noisy int) ([]*localenv.User, error) {
	names := []string{"steady"}
	for i := range noisy {
		names = append(names, fmt.Sprintf("noisy-%d", i))
	}
	args := []string{"create", "clusterrolebinding", "bench-isolation:cluster-gateway:proxy", "--clusterrole=cluster-gateway:proxy"}
	var users []*localenv.User
	for _, n := range names {
		u, err := env.NewUser(n)
		if err != nil {
			return nil, err
		}
		users = append(users, u)
		args = append(args, "--user="+n)
	}
	if _, err := env.Kubectl(env.Hub.Kubeconfig, args...); err != nil {
		return nil, err
	}
	return users, nil
}

// createSlowGateway creates a ClusterGateway to managed cluster c through
// the forward proxy at proxyURL, and waits until the gateway serves it.
func createSlowGateway(ctx context.Context, env *localenv.Env, name string, c *localenv.Cluster, proxyURL string) error {
	cs, err := versioned.NewForConfig(env.Hub.RESTConfig())
	if err != nil {
		return err
	}
	gw := &gatewayv1alpha1.ClusterGateway{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: gatewayv1alpha1.ClusterGatewaySpec{
			Endpoint: gatewayv1alpha1.Endpoint{Type: gatewayv1alpha1.EndpointDirect, Address: c.URL, CABundle: c.CA.CertPEM, ProxyURL: proxyURL},
			Credential: gatewayv1alpha1.Credential{
				Type: gatewayv1alpha1.CredentialX509Certificate,
				X509: &gatewayv1alpha1.X509Credential{Certificate: c.GatewayUser.CertPEM, PrivateKey: c.GatewayUser.KeyPEM},
			},
		},
	}
	if _, err := cs.GatewayV1alpha1().ClusterGateways().Create(ctx, gw, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ClusterGateway %s: %w", name, err)
	}
	return nil
}

// restartGateway restarts the gateway with args.
func restartGateway(ctx context.Context, env *localenv.Env, args []string) error {
	if err := env.StopGateway(); err != nil {
		return fmt.Errorf("stop the gateway: %w", err)
	}
	if err := env.StartGateway(ctx, args); err != nil {
		return fmt.Errorf("start the gateway with %v: %w", args, err)
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

// machineCPU is the busy CPU time of the whole machine: user, nice, system,
// irq and softirq from the first line of /proc/stat (not idle, iowait or
// steal; guest time is already in user).
func machineCPU() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat begins %q", line)
	}
	var busy float64
	for _, i := range []int{1, 2, 3, 6, 7} {
		n, _ := strconv.ParseFloat(f[i], 64)
		busy += n
	}
	return time.Duration(busy / clockTicks * float64(time.Second)), nil
}
