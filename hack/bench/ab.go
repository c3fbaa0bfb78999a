package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
)

// The A/B section: the same load on gateways that differ in one piece
// each, run side by side in one environment, so that each piece of the
// gateway that replaces stock k8s.io/apiserver or net/http behaviour shows
// what it saves. Every variant is a gateway process of its own on its own
// port, all serving the same ClusterGateways; the hub reaches the one being
// measured through a forwarder in this process that is switched between
// rounds (the APIService points at the forwarder).

var (
	abRounds = flag.Int("ab-rounds", 4, "A/B: interleaved rounds; every variant and path runs once per round (0 skips the section)")
	abPer    = flag.Duration("ab-per", 3*time.Second, "A/B: load per variant, path and round")
	abQuiet  = flag.Duration("ab-quiet", 10*time.Second, "A/B: quiet time after the rounds before the idle RSS is read")
)

// abVariant is one gateway of the A/B section: the defaults plus Args.
type abVariant struct {
	Key, What string
	Args      []string
}

// abVariants are the pieces a reviewer must read twice, each switched off
// alone; baseline has every one on (the defaults).
var abVariants = []abVariant{
	{Key: "baseline", What: "the defaults"},
	{Key: "stock-chain", What: "k8s.io/apiserver's DefaultBuildHandlerChain wrapped around the proxy route, instead of the copy", Args: []string{"--ab-stock-handler-chain"}},
	{Key: "no-certauth", What: "the certificate cache off: the generic authenticators verify every request's chain", Args: []string{"--authentication-certificate-cache-size=0"}},
}

// abPaths are the two ways in: through the hub (the product's path) and
// straight to the gateway's port.
var abPaths = []string{"hub", "port"}

// abUser is who the A/B loads authenticate as: like benchUser, a hub user
// outside system:masters, so that every request is authorized as a real
// user's is.
const abUser = "cluster-gateway-ab"

type abRow struct {
	Variant abVariant
	Res     map[string]*abResult // by path
	// RSS of the process: after it started and synced, the most seen
	// under load, and after the rounds and -ab-quiet.
	RSSStart, RSSLoad, RSSIdle float64
	g                          *localenv.Gateway
}

type abResult struct {
	Requests, Errors int
	FirstErr         error
	CPU              time.Duration // the variant's process, over its rounds on this path
	Hub              time.Duration // the hub's, over the same rounds
	Lat              []time.Duration
}

func (r *abResult) cpuPerReq(d time.Duration) time.Duration {
	if r.Requests == 0 {
		return 0
	}
	return d / time.Duration(r.Requests)
}

func (r *abResult) pct(p float64) time.Duration {
	if len(r.Lat) == 0 {
		return 0
	}
	return r.Lat[min(len(r.Lat)-1, int(float64(len(r.Lat))*p))]
}

type abResultSet struct {
	Rows  []*abRow
	Conc  int
	Per   time.Duration
	Round int
}

// runAB starts one gateway per variant, loads each in interleaved rounds
// through the hub and on its port, and stops them.
func runAB(ctx context.Context, o options, env *localenv.Env, gatewayArgs []string) (res *abResultSet, err error) {
	if *abRounds <= 0 {
		return nil, nil
	}
	user, err := env.NewUser(abUser)
	if err != nil {
		return nil, err
	}
	if _, err := env.Kubectl(env.Hub.Kubeconfig, "create", "clusterrolebinding", abUser,
		"--clusterrole=cluster-gateway:proxy-reader", "--user="+abUser); err != nil {
		return nil, err
	}
	fwd, err := newSwitchForwarder()
	if err != nil {
		return nil, err
	}
	defer fwd.Close()
	res = &abResultSet{Conc: o.Concurrency, Per: *abPer, Round: *abRounds}
	defer func() {
		for _, r := range res.Rows {
			if serr := env.StopReplica(r.g, 10*time.Second); serr != nil {
				logf("A/B: stopping %s: %v", r.Variant.Key, serr)
			}
		}
		// Give the hub back to the environment's own gateway.
		if perr := env.PointAPIService(ctx, env.Gateway.Port); perr != nil && err == nil {
			err = perr
		}
	}()
	for _, v := range abVariants {
		logf("A/B: starting the %s gateway %v", v.Key, v.Args)
		g, err := env.StartReplica(ctx, "gateway-ab-"+v.Key, append(slices.Clone(gatewayArgs), v.Args...))
		if err != nil {
			return res, fmt.Errorf("A/B gateway %s: %w", v.Key, err)
		}
		res.Rows = append(res.Rows, &abRow{Variant: v, g: g, Res: map[string]*abResult{}})
	}
	fwd.switchTo(res.Rows[0].g.Port)
	if err := env.PointAPIService(ctx, fwd.Port()); err != nil {
		return res, err
	}
	hubClient, err := mtlsClient(env.Hub.CA.CertPEM, user.Cert)
	if err != nil {
		return res, err
	}
	defer hubClient.CloseIdleConnections()
	m1 := env.Managed[0]
	proxyPath := "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/" + m1.GatewayName + "/proxy" + requestPath
	hubPid := env.Hub.Process.Pid()
	targets := map[string]map[string]*target{} // variant -> path -> target
	for _, r := range res.Rows {
		pc, err := mtlsClient(env.Gateway.CA.CertPEM, user.Cert)
		if err != nil {
			return res, err
		}
		defer pc.CloseIdleConnections()
		targets[r.Variant.Key] = map[string]*target{
			"hub":  {Key: "hub", Name: "hub → " + r.Variant.Key, URL: env.Hub.URL + proxyPath, Client: hubClient},
			"port": {Key: "port", Name: "port of " + r.Variant.Key, URL: r.g.URL + proxyPath, Client: pc},
		}
		if r.RSSStart, err = procRSS(r.g.Process.Pid()); err != nil {
			return res, err
		}
	}
	for round := range *abRounds {
		for _, r := range res.Rows {
			pid := r.g.Process.Pid()
			for _, path := range abPaths {
				t := targets[r.Variant.Key][path]
				if path == "hub" {
					// New connections from the hub go to this variant; the
					// old ones are cut while nothing is in flight.
					fwd.switchTo(r.g.Port)
				}
				if err := abWarm(ctx, t, o.Concurrency); err != nil {
					return res, fmt.Errorf("A/B warm-up of %s over %s: %w", r.Variant.Key, path, err)
				}
				cpu0, err := procCPU(pid)
				if err != nil {
					return res, err
				}
				hub0, err := procCPU(hubPid)
				if err != nil {
					return res, err
				}
				stop := make(chan struct{})
				peak := make(chan float64, 1)
				go func() { peak <- sampleRSS(pid, stop) }()
				n, errs, ferr, lat := burst(ctx, t, o.Concurrency, *abPer)
				close(stop)
				cpu1, err := procCPU(pid)
				if err != nil {
					return res, err
				}
				hub1, err := procCPU(hubPid)
				if err != nil {
					return res, err
				}
				r.RSSLoad = max(r.RSSLoad, <-peak)
				a := r.Res[path]
				if a == nil {
					a = &abResult{}
					r.Res[path] = a
				}
				a.Requests += n
				a.Errors += errs
				if a.FirstErr == nil {
					a.FirstErr = ferr
				}
				a.CPU += cpu1 - cpu0
				a.Hub += hub1 - hub0
				a.Lat = append(a.Lat, lat...)
			}
			logf("A/B round %d/%d %-15s hub %s/req, port %s/req", round+1, *abRounds, r.Variant.Key,
				r.Res["hub"].cpuPerReq(r.Res["hub"].CPU), r.Res["port"].cpuPerReq(r.Res["port"].CPU))
		}
	}
	for _, r := range res.Rows {
		for _, a := range r.Res {
			slices.Sort(a.Lat)
		}
	}
	hubClient.CloseIdleConnections()
	fwd.switchTo(env.Gateway.Port)
	for _, ts := range targets {
		for _, t := range ts {
			t.Client.CloseIdleConnections()
		}
	}
	logf("A/B: %s quiet before the idle RSS", *abQuiet)
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(*abQuiet):
	}
	for _, r := range res.Rows {
		if r.RSSIdle, err = procRSS(r.g.Process.Pid()); err != nil {
			return res, err
		}
	}
	return res, nil
}

// abWarm runs the load until a full second of it succeeds: after a switch,
// the hub's first request may still meet the connection that was cut.
func abWarm(ctx context.Context, t *target, conc int) error {
	var last error
	for range 10 {
		_, errs, err, _ := burst(ctx, t, conc, time.Second)
		if errs == 0 {
			return nil
		}
		last = err
	}
	return last
}

// sampleRSS is the most RSS pid had, read every 100ms until stop.
func sampleRSS(pid int, stop <-chan struct{}) float64 {
	var most float64
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if v, err := procRSS(pid); err == nil {
			most = max(most, v)
		}
		select {
		case <-stop:
			return most
		case <-tick.C:
		}
	}
}

// switchForwarder is a TCP forwarder on loopback whose target port can be
// switched; switching cuts the connections it carries, so the client's next
// request dials the new target.
type switchForwarder struct {
	ln    net.Listener
	to    atomic.Int64
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newSwitchForwarder() (*switchForwarder, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &switchForwarder{ln: ln, conns: map[net.Conn]struct{}{}}
	f.wg.Go(f.accept)
	return f, nil
}

func (f *switchForwarder) Port() int { return f.ln.Addr().(*net.TCPAddr).Port }

func (f *switchForwarder) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.wg.Go(func() { f.carry(c) })
	}
}

func (f *switchForwarder) carry(c net.Conn) {
	up, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(f.to.Load()))), 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	if !f.track(c, up) {
		return
	}
	defer f.untrack(c, up)
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = io.Copy(up, c); up.Close(); c.Close() })
	_, _ = io.Copy(c, up)
	c.Close()
	up.Close()
	wg.Wait()
}

// track adds the pair unless the forwarder is closed.
func (f *switchForwarder) track(cs ...net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conns == nil {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		f.conns[c] = struct{}{}
	}
	return true
}

func (f *switchForwarder) untrack(cs ...net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range cs {
		delete(f.conns, c)
	}
}

// switchTo sends new connections to port and cuts the open ones.
func (f *switchForwarder) switchTo(port int) {
	f.to.Store(int64(port))
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		c.Close()
	}
}

// Close stops accepting, cuts every connection and waits for the copies.
func (f *switchForwarder) Close() {
	f.ln.Close()
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
	}
	f.conns = nil
	f.mu.Unlock()
	f.wg.Wait()
}

// abSection is the A/B table: each variant's gateway CPU per request, as a
// ratio to the baseline's, with latency and memory.
func (r *report) abSection(b *strings.Builder) {
	ab := r.AB
	base := ab.Rows[0]
	fmt.Fprintf(b, "## A/B: each custom piece switched off alone\n\n")
	fmt.Fprintf(b, "One gateway process per variant, all serving the same ClusterGateways in this one environment, each loaded with %d keep-alive workers "+
		"GETting `%s` of managed-1 as `%s` (a hub user outside system:masters), %s per variant and path in %d interleaved rounds. "+
		"Through the hub, the APIService points at a forwarder in the bench process that is switched to the variant being measured. "+
		"CPU per request is the variant's process only (utime+stime over its requests); the ratio is to the baseline's on the same path, "+
		"so a ratio above 1 is what the piece saves. RSS: after start, the most under load, and idle %s after the rounds.\n\n",
		ab.Conc, requestPath, abUser, ab.Per, ab.Round, *abQuiet)
	b.WriteString("| variant | switched off | hub: gateway CPU/req | ratio | p50 | p99 | hub kube-apiserver CPU/req | port: gateway CPU/req | ratio | p50 | p99 | RSS start / load / idle | errors |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, row := range ab.Rows {
		h, p := row.Res["hub"], row.Res["port"]
		if h == nil || p == nil {
			continue
		}
		bh, bp := base.Res["hub"], base.Res["port"]
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s / %s | %d |\n",
			row.Variant.Key, row.Variant.What,
			fmtDur(h.cpuPerReq(h.CPU)), abRatio(h.cpuPerReq(h.CPU), bh.cpuPerReq(bh.CPU)), fmtDur(h.pct(0.5)), fmtDur(h.pct(0.99)), fmtDur(h.cpuPerReq(h.Hub)),
			fmtDur(p.cpuPerReq(p.CPU)), abRatio(p.cpuPerReq(p.CPU), bp.cpuPerReq(bp.CPU)), fmtDur(p.pct(0.5)), fmtDur(p.pct(0.99)),
			mib(row.RSSStart), mib(row.RSSLoad), mib(row.RSSIdle), h.Errors+p.Errors)
	}
	b.WriteString("\n")
	b.WriteString("A piece is kept when switching it off costs at least 5% more gateway CPU per request through the hub (a ratio of 1.05× or more), " +
		"or when a test names a safety property it holds. In this run:\n\n")
	for _, row := range ab.Rows[1:] {
		h, bh := row.Res["hub"], base.Res["hub"]
		if h == nil || bh == nil || bh.cpuPerReq(bh.CPU) <= 0 {
			continue
		}
		r := ratio(h.cpuPerReq(h.CPU), bh.cpuPerReq(bh.CPU))
		verdict := "at or above the bar"
		if r < abKeepRatio {
			verdict = "below the bar: keep it only for a safety property a test names, else remove it"
		}
		fmt.Fprintf(b, "- %s (%s): %.2f× through the hub, %s.\n", row.Variant.Key, row.Variant.What, r, verdict)
	}
	b.WriteString("\nThe pieces removed after earlier A/B runs, with those runs' tables: [performance-ab-history.md](performance-ab-history.md).\n\n")
}

// abKeepRatio is the bar a piece must clear through the hub: switching it
// off costs at least 5% more of the gateway's CPU per request.
const abKeepRatio = 1.05

// abRatio is a / base, or a dash without a baseline.
func abRatio(a, base time.Duration) string {
	if base <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", ratio(a, base))
}
