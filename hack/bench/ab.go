package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
)

// The A/B section: the same load on gateways that differ in one piece each,
// side by side, so that each piece that replaces stock k8s.io/apiserver or
// net/http behaviour shows what it saves. Each variant is a gateway process
// of its own; the hub reaches the one measured through a forwarder in this
// process (the APIService points at it), switched between rounds.

var (
	abRounds = flag.Int("ab-rounds", 4, "A/B: interleaved rounds; every variant and path runs once per round (0 skips the section)")
	abPer    = flag.Duration("ab-per", 3*time.Second, "A/B: load per variant, path and round")
	abQuiet  = flag.Duration("ab-quiet", 10*time.Second, "A/B: quiet time after the rounds before the idle RSS is read")
)

// abVariant is one gateway of the A/B section: the defaults plus Args. Cost
// marks a row that switches on what the defaults leave off: its ratio is
// what that costs, and no bar applies.
type abVariant struct {
	Key, What string
	Args      []string
	Cost      bool
}

// abVariants are the pieces, each switched off alone; baseline is the defaults.
var abVariants = []abVariant{
	{Key: "baseline", What: "the defaults"},
	{Key: "stock-chain", What: "k8s.io/apiserver's DefaultBuildHandlerChain wrapped around the proxy route, instead of the copy", Args: []string{"--ab-stock-handler-chain"}},
	// What handlerchain.go, route.go and memo.go together save (issue 38).
	{Key: "stock-path", What: "the whole stock path: k8s.io/apiserver's DefaultBuildHandlerChain, the proxy subresource served by go-restful's REST connect handler (no proxy route, no inner-request memo)", Args: []string{"--ab-stock-proxy-path"}},
	// What tracing every request costs (issue 40); the defaults trace nothing.
	{Key: "tracing-no-exporter", What: "tracing on (every request sampled: the server span, the fairness, lease, dial and client spans) to a provider that exports nothing", Args: []string{"--ab-tracing-no-exporter"}, Cost: true},
	{Key: "no-stack-growth", What: "each request's stack grown deep in the chain, not up front (withGrownStack off)", Args: []string{"--ab-no-stack-growth"}},
	{Key: "no-certauth", What: "the certificate cache off: the generic authenticators verify every request's chain", Args: []string{"--authentication-certificate-cache-size=0"}},
}

// abPaths are the two ways in: through the hub and to the gateway's port.
var abPaths = []string{"hub", "port"}

// abUser is who the A/B loads authenticate as (like benchUser).
const abUser = "cluster-gateway-ab"

// abKeepRatio is the bar a piece must clear through the hub: switching it
// off costs at least 5% more of the gateway's CPU per request.
const abKeepRatio = 1.05

type abResultSet struct {
	Rows  []*abRow
	Conc  int
	Per   time.Duration
	Round int
}

type abRow struct {
	Variant abVariant
	Res     map[string]*loadResult // by path; CPU "gateway" is the variant's process
	// RSS after the start, the most under load, and idle after -ab-quiet.
	RSSStart, RSSLoad, RSSIdle float64
	g                          *localenv.Gateway
	loads                      map[string]*target // by path
}

// runAB starts one gateway per variant, loads each in interleaved rounds
// through the hub and on its port, and stops them.
func runAB(ctx context.Context, s *session) (err error) {
	if *abRounds <= 0 {
		return nil
	}
	logf("A/B: one gateway per piece switched off")
	env := s.env
	ab := &abResultSet{Conc: s.o.Concurrency, Per: *abPer, Round: *abRounds}
	s.rep.AB = ab
	fwd, err := newSwitchForwarder()
	if err != nil {
		return err
	}
	defer fwd.Close()
	defer func() {
		for _, r := range ab.Rows {
			if serr := env.StopReplica(r.g, 10*time.Second); serr != nil {
				logf("A/B: stopping %s: %v", r.Variant.Key, serr)
			}
			for _, t := range r.loads {
				t.Client.CloseIdleConnections()
			}
		}
		// Give the hub back to the environment's own gateway.
		if perr := env.PointAPIService(ctx, env.Gateway.Port); perr != nil && err == nil {
			err = perr
		}
	}()
	if err := ab.start(ctx, env, s.gatewayArgs, fwd); err != nil {
		return err
	}
	if err := ab.rounds(ctx, env, fwd); err != nil {
		return err
	}
	fwd.switchTo(env.Gateway.Port)
	return ab.idle(ctx)
}

// rounds loads every variant on every path once per round, switching the
// forwarder to the variant before its hub load. Each round begins one
// variant later than the one before, so that no variant always runs first
// (after the pause between rounds) while the machine's load drifts.
func (ab *abResultSet) rounds(ctx context.Context, env *localenv.Env, fwd *switchForwarder) error {
	for round := range *abRounds {
		for i := range ab.Rows {
			r := ab.Rows[(i+round)%len(ab.Rows)]
			for _, path := range abPaths {
				if path == "hub" {
					// New connections from the hub go to this variant; the
					// old ones are cut while nothing is in flight.
					fwd.switchTo(r.g.Port)
				}
				if err := r.measure(ctx, r.loads[path], ab.Conc, env.Hub.Process.Pid()); err != nil {
					return fmt.Errorf("%s over %s: %w", r.Variant.Key, path, err)
				}
			}
			logf("A/B round %d/%d %-15s hub %s/req, port %s/req", round+1, *abRounds, r.Variant.Key, fmtDur(r.Res["hub"].PerReq("gateway")), fmtDur(r.Res["port"].PerReq("gateway")))
		}
	}
	return nil
}

// idle sorts the latencies, closes the loads' connections and reads each
// variant's RSS after -ab-quiet.
func (ab *abResultSet) idle(ctx context.Context) (err error) {
	for _, r := range ab.Rows {
		for _, res := range r.Res {
			slices.Sort(res.Lat)
		}
		for _, t := range r.loads { // no client connection held while idle
			t.Client.CloseIdleConnections()
		}
	}
	logf("A/B: %s quiet before the idle RSS", *abQuiet)
	if err := sleep(ctx, *abQuiet); err != nil {
		return err
	}
	for _, r := range ab.Rows {
		if r.RSSIdle, err = procRSS(r.g.Process.Pid()); err != nil {
			return err
		}
	}
	return nil
}

// start starts a gateway per variant and its loads as abUser (a client of
// its own to its port, one to the hub shared by all), and points the hub
// at the forwarder, switched to the first variant.
func (ab *abResultSet) start(ctx context.Context, env *localenv.Env, gatewayArgs []string, fwd *switchForwarder) error {
	users, err := newUsers(env, abUser, "cluster-gateway:proxy-reader", abUser)
	if err != nil {
		return err
	}
	user := users[0]
	hubClient, err := mtlsClient(env.Hub.CA.CertPEM, user.Cert)
	if err != nil {
		return err
	}
	proxyPath := proxyPrefix(env.Managed[0]) + requestPath
	for _, v := range abVariants {
		logf("A/B: starting the %s gateway %v", v.Key, v.Args)
		g, err := env.StartReplica(ctx, "gateway-ab-"+v.Key, append(slices.Clone(gatewayArgs), v.Args...))
		if err != nil {
			return fmt.Errorf("A/B gateway %s: %w", v.Key, err)
		}
		r := &abRow{Variant: v, g: g, Res: map[string]*loadResult{}}
		ab.Rows = append(ab.Rows, r)
		pc, err := mtlsClient(env.Gateway.CA.CertPEM, user.Cert)
		if err != nil {
			return err
		}
		r.loads = map[string]*target{
			"hub":  {Key: "hub", Name: "hub → " + v.Key, URL: env.Hub.URL + proxyPath, Client: hubClient},
			"port": {Key: "port", Name: "port of " + v.Key, URL: g.URL + proxyPath, Client: pc},
		}
		if r.RSSStart, err = procRSS(g.Process.Pid()); err != nil {
			return err
		}
	}
	fwd.switchTo(ab.Rows[0].g.Port)
	return env.PointAPIService(ctx, fwd.Port())
}

// measure runs t's load on variant r once, after a warm-up, and adds it to
// r's results on t's path: requests, the variant's and the hub's CPU, and
// the most RSS the variant had meanwhile.
func (r *abRow) measure(ctx context.Context, t *target, conc, hubPid int) error {
	if err := abWarm(ctx, t, conc); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	pid := r.g.Process.Pid()
	stop := sampleMax(100*time.Millisecond, rssOf(pid))
	if r.Res[t.Key] == nil {
		r.Res[t.Key] = &loadResult{}
	}
	err := r.Res[t.Key].measure(ctx, t, conc, *abPer, map[string]int{"gateway": pid, "hub": hubPid})
	most, _ := stop()
	r.RSSLoad = max(r.RSSLoad, most)
	return err
}

// abWarm runs the load until a second of it succeeds: after a switch, the
// hub's first request may meet the connection that was cut.
func abWarm(ctx context.Context, t *target, conc int) error {
	var last error
	for range 10 {
		b := burst(ctx, t, conc, time.Second)
		if b.errs == 0 {
			return nil
		}
		last = b.firstErr
	}
	return last
}

// switchForwarder is a TCP forwarder on loopback whose target port can be
// switched, which cuts the connections it carries.
type switchForwarder struct {
	ln    net.Listener
	to    atomic.Int64
	mu    sync.Mutex
	conns map[net.Conn]struct{} // nil once closed
	wg    sync.WaitGroup
}

func newSwitchForwarder() (*switchForwarder, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &switchForwarder{ln: ln, conns: map[net.Conn]struct{}{}}
	f.wg.Go(func() {
		for {
			c, err := f.ln.Accept()
			if err != nil {
				return
			}
			f.wg.Go(func() { f.carry(c) })
		}
	})
	return f, nil
}

func (f *switchForwarder) Port() int { return f.ln.Addr().(*net.TCPAddr).Port }

func (f *switchForwarder) carry(c net.Conn) {
	up, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(f.to.Load()))), 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	f.mu.Lock()
	closed := f.conns == nil
	if !closed {
		f.conns[c], f.conns[up] = struct{}{}, struct{}{}
	}
	f.mu.Unlock()
	if !closed {
		var wg sync.WaitGroup
		wg.Go(func() { _, _ = io.Copy(up, c); up.Close(); c.Close() })
		_, _ = io.Copy(c, up)
		wg.Wait()
	}
	c.Close()
	up.Close()
	f.mu.Lock()
	delete(f.conns, c)
	delete(f.conns, up)
	f.mu.Unlock()
}

// cut closes the connections it carries; close: and no more.
func (f *switchForwarder) cut(close bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		c.Close()
	}
	if close {
		f.conns = nil
	}
}

// switchTo sends new connections to port and cuts the open ones.
func (f *switchForwarder) switchTo(port int) {
	f.to.Store(int64(port))
	f.cut(false)
}

// Close stops accepting, cuts every connection and waits for the copies.
func (f *switchForwarder) Close() {
	f.ln.Close()
	f.cut(true)
	f.wg.Wait()
}

// The A/B table and verdicts (report.md.tmpl).

func (ab *abResultSet) User() string         { return abUser }
func (ab *abResultSet) Quiet() time.Duration { return *abQuiet }

// RatioCell is ratio as a cell, a dash without a baseline.
func (ab *abResultSet) RatioCell(row *abRow, path string) string {
	if r, ok := ab.ratio(row, path); ok {
		return x(r)
	}
	return "–"
}

// ratio is the gateway's CPU per request of row over the baseline's on
// path; false without a baseline.
func (ab *abResultSet) ratio(row *abRow, path string) (float64, bool) {
	base, res := ab.Rows[0].Res[path], row.Res[path]
	if base == nil || res == nil || base.PerReq("gateway") <= 0 {
		return 0, false
	}
	return ratio(res.PerReq("gateway"), base.PerReq("gateway")), true
}

// abVerdict is a variant's ratio through the hub, and whether it clears
// the bar.
type abVerdict struct {
	Variant abVariant
	Ratio   float64
	Kept    bool
}

func (ab *abResultSet) Verdicts() (out []abVerdict) {
	for _, row := range ab.Rows[1:] {
		if r, ok := ab.ratio(row, "hub"); ok {
			out = append(out, abVerdict{row.Variant, r, r >= abKeepRatio})
		}
	}
	return out
}
