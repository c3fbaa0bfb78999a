package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
)

// Delegated authorization: the gateway asks the hub whether a caller may use
// clustergateways/proxy with a SubjectAccessReview, and the generic webhook
// authorizer keeps the answer (allowed for
// --authorization-webhook-cache-authorized-ttl, denied for
// --authorization-webhook-cache-unauthorized-ttl, 10 s each by default). Each load counts
// both ends: the gateway's calls and the SubjectAccessReviews the hub received.
const (
	mDelegatedAuthz = "apiserver_delegated_authz_request_total" // gateway: SARs it sent, by code
	mHubRequests    = "apiserver_request_total"                 // hub: requests by resource, verb, code...
)

// authzCount is both counters at one moment.
type authzCount struct {
	HubSARs   float64 // hub apiserver_request_total{resource="subjectaccessreviews"}, all label sets
	Delegated float64 // gateway apiserver_delegated_authz_request_total, all codes
}

// authzDelta is what a load added to them.
type authzDelta struct{ HubSARs, Delegated float64 }

func (d *authzDelta) add(before, after authzCount) {
	d.HubSARs += after.HubSARs - before.HubSARs
	d.Delegated += after.Delegated - before.Delegated
}

// sumOf adds the samples of name over all its label sets.
func sumOf(m map[string]float64, name string) float64 {
	var sum float64
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			sum += v
		}
	}
	return sum
}

// authzCounts reads the hub's SubjectAccessReview count and the gateway's
// delegated authorization count. Both scrapes are by system:masters users,
// whom neither authorizer asks about, so they add no review themselves.
func (g *gatewayAdmin) authzCounts(ctx context.Context) (authzCount, error) {
	s, err := g.state(ctx)
	if err != nil {
		return authzCount{}, err
	}
	sars, err := g.hubSARs(ctx)
	return authzCount{HubSARs: sars, Delegated: s.Delegated}, err
}

// hubSARs sums apiserver_request_total{resource="subjectaccessreviews"} of
// the hub kube-apiserver. Its /metrics is large, so only those lines are
// read, as text.
func (g *gatewayAdmin) hubSARs(ctx context.Context) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.env.Hub.URL+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := g.hub.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET hub /metrics: %s", resp.Status)
	}
	return sumSamples(bufio.NewScanner(resp.Body), mHubRequests, `resource="subjectaccessreviews"`)
}

// sumSamples adds the values of name's samples whose labels contain label.
func sumSamples(sc *bufio.Scanner, name, label string) (float64, error) {
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var sum float64
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok || !strings.Contains(rest, label) {
			continue
		}
		i := strings.LastIndexByte(rest, '}')
		if i < 0 {
			return 0, fmt.Errorf("malformed sample %q", line)
		}
		f := strings.Fields(rest[i+1:])
		if len(f) == 0 {
			return 0, fmt.Errorf("malformed sample %q", line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("sample %q: %w", line, err)
		}
		sum += v
	}
	return sum, sc.Err()
}

// The authorization cache's TTLs (k8s.io/apiserver's
// DelegatingAuthorizationOptions, 10 s each by default).
const (
	flagAllowTTL    = "authorization-webhook-cache-authorized-ttl"
	defaultAuthzTTL = 10 * time.Second
)

// flagValue is the value of --name in args (the last one), or def.
func flagValue(args []string, name, def string) string {
	v := def
	for i, a := range args {
		if a == "--"+name && i+1 < len(args) {
			v = args[i+1]
		} else if rest, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			v = rest
		}
	}
	return v
}

// authzWindow is how long measureAuthzSteady loads each gateway path right
// after its authorization decision was filled.
var authzWindow = flag.Duration("authz-window", 3*time.Second,
	"after the loads, each gateway path is loaded this long right after its cached authorization decision was filled, "+
		"counting the hub's SubjectAccessReviews (capped below the authorized TTL; 0 skips it)")

// authzSteady is one gateway path's delegated authorization in a window
// right after its decision was filled.
type authzSteady struct {
	Requests int
	Window   time.Duration
	Filled   float64 // reviews of the warm-up that filled the decision
	authzDelta
}

// freshCallers gives every gateway load a client of a caller of its own
// (cluster-gateway-bench-<load>, bound like benchUser) that no load uses:
// the gateway has no decision cached for it, so the first request of
// measureAuthzSteady's warm-up surely fills one. The binding is checked
// now, long (more than a TTL) before that warm-up.
func freshCallers(ctx context.Context, env *localenv.Env, ts []*target) error {
	if *authzWindow <= 0 {
		return nil
	}
	args := []string{"create", "clusterrolebinding", benchUser + "-fresh:cluster-gateway:proxy-reader", "--clusterrole=cluster-gateway:proxy-reader"}
	users := map[string]*localenv.User{}
	for _, t := range ts {
		if t.TODO != "" || !gatewayLoads[t.Key] {
			continue
		}
		u, err := env.NewUser(benchUser + "-" + t.Key)
		if err != nil {
			return err
		}
		users[t.Key] = u
		args = append(args, "--user="+u.Name)
	}
	if len(users) == 0 {
		return nil
	}
	if _, err := env.Kubectl(env.Hub.Kubeconfig, args...); err != nil {
		return err
	}
	for _, t := range ts {
		u := users[t.Key]
		if u == nil {
			continue
		}
		ca := env.Gateway.CA.CertPEM
		if t.Key == "hub" {
			ca = env.Hub.CA.CertPEM
		}
		c, err := mtlsClient(ca, u.Cert)
		if err != nil {
			return err
		}
		fresh := *t
		fresh.Client = c
		if err := waitAllowed(ctx, &fresh); err != nil {
			return err
		}
		c.CloseIdleConnections()
		t.FreshClient = c
	}
	return nil
}

// measureAuthzSteady loads each gateway path once more as its fresh caller:
// a warm-up whose first request fills the caller's decision, then
// -authz-window (well inside the TTL) in which it counts the reviews.
// During the interleaved rounds a path's decision has usually expired since
// its previous round (they are further apart than the TTL), so each round
// begins with a refill; this window shows what follows a fill.
//
// It returns the same counts over a time without load as long as all those
// windows: reviews not caused by the loads, which the windows include too.
func measureAuthzSteady(ctx context.Context, gw *gatewayAdmin, ts []*target, conc int, warm time.Duration) (*authzSteady, error) {
	ttl, err := time.ParseDuration(flagValue(gw.env.Gateway.Args, flagAllowTTL, defaultAuthzTTL.String()))
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flagAllowTTL, err)
	}
	window := min(*authzWindow, ttl-warm-time.Second)
	if *authzWindow <= 0 || window <= 0 {
		logf("no authorization window after a fill (-authz-window %s, authorized TTL %s)", *authzWindow, ttl)
		return nil, nil
	}
	windows := 0
	for _, t := range ts {
		if t.TODO != "" || t.FreshClient == nil {
			continue
		}
		windows++
		fresh := *t
		fresh.Client = t.FreshClient
		c0, err := gw.authzCounts(ctx)
		if err != nil {
			return nil, err
		}
		if b := burst(ctx, &fresh, conc, warm); b.errs > 0 {
			return nil, fmt.Errorf("warm-up of %s as a fresh caller: %d errors, first: %v", t.Name, b.errs, b.firstErr)
		}
		c1, err := gw.authzCounts(ctx)
		if err != nil {
			return nil, err
		}
		n := burst(ctx, &fresh, conc, window).n
		c2, err := gw.authzCounts(ctx)
		if err != nil {
			return nil, err
		}
		t.FreshClient.CloseIdleConnections()
		s := &t.Res.Steady
		s.Requests, s.Window, s.Filled = n, window, c1.HubSARs-c0.HubSARs
		s.add(c1, c2)
		logf("authorization after a fill, %-28s warm-up %.0f SubjectAccessReviews; then %d requests in %s, %.0f", t.Name, s.Filled, n, window, s.HubSARs)
	}
	// As long as all the windows under load together.
	idle := &authzSteady{Window: window * time.Duration(max(1, windows))}
	before, err := gw.authzCounts(ctx)
	if err != nil {
		return nil, err
	}
	if err := sleep(ctx, idle.Window); err != nil {
		return nil, err
	}
	after, err := gw.authzCounts(ctx)
	if err != nil {
		return nil, err
	}
	idle.add(before, after)
	logf("authorization without load: %.0f SubjectAccessReviews in %s", idle.HubSARs, idle.Window)
	return idle, nil
}

// gatewayLoads are the loads whose requests the gateway authorizes.
var gatewayLoads = map[string]bool{"gateway": true, "hub": true, "konn": true, "gateway-many": true}

// SteadyWindow is the length of the windows after a fill (0 without any).
func (r *report) SteadyWindow() time.Duration {
	for _, t := range r.Targets {
		if t.Res.Steady.Window > 0 {
			return t.Res.Steady.Window
		}
	}
	return 0
}

// gatewayAuthz sums the requests and authorization counters of the loads
// through the gateway: of their rounds, or of their windows right after a
// warm-up (steady).
func (r *report) gatewayAuthz(steady bool) (requests int, sars, delegated float64) {
	for _, t := range r.Targets {
		if t.TODO != "" || !gatewayLoads[t.Key] {
			continue
		}
		n, a := t.Res.Requests, t.Res.Authz
		if steady {
			n, a = t.Res.Steady.Requests, t.Res.Steady.authzDelta
		}
		requests += n
		sars += a.HubSARs
		delegated += a.Delegated
	}
	return requests, sars, delegated
}

func (r *report) AuthzTable() *table {
	t := newTable("lrrrrrrrrrr", "path", "workers", "requests", "gateway authorization calls to the hub", "SubjectAccessReviews on the hub", "SARs per round",
		"SARs per 1,000 requests", "fresh caller: SARs filling its decision", "then: requests", "SARs", "SARs per 1,000 requests")
	for _, l := range r.Targets {
		if l.TODO != "" {
			continue
		}
		a, s := l.Res.Authz, l.Res.Steady
		steady := []string{"–", "–", "–", "–"}
		if s.Requests > 0 {
			steady = []string{fmt.Sprintf("%.0f", s.Filled), fmt.Sprint(s.Requests), fmt.Sprintf("%.0f", s.HubSARs), fmt.Sprintf("%.2f", perThousand(s.HubSARs, s.Requests))}
		}
		t.add(append([]string{l.Name, fmt.Sprint(workersOf(l, r.Opts.Concurrency)), fmt.Sprint(l.Res.Requests), fmt.Sprintf("%.0f", a.Delegated), fmt.Sprintf("%.0f", a.HubSARs),
			fmt.Sprintf("%.1f", a.HubSARs/float64(max(1, len(l.Res.RoundRPS)))), fmt.Sprintf("%.2f", perThousand(a.HubSARs, l.Res.Requests))}, steady...)...)
	}
	if i := r.AuthzIdle; i != nil {
		t.add(fmt.Sprintf("no load for %s (control)", i.Window), "–", "–", "–", "–", "–", "–", "–", "0", fmt.Sprintf("%.0f (the gateway asked %.0f)", i.HubSARs, i.Delegated), "–")
	}
	return t
}

// AuthzTTL is the gateway's authorization cache TTL flag in the loads.
func (r *report) AuthzTTL(flag string) string {
	return flagValue(r.GatewayArgs, flag, defaultAuthzTTL.String()+", the default")
}

// workersOf is the workers of t's load.
func workersOf(t *target, def int) int {
	if t.Workers > 0 {
		return t.Workers
	}
	return def
}
