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

// perThousand is n per 1,000 requests.
func perThousand(n float64, requests int) float64 {
	if requests == 0 {
		return 0
	}
	return n * 1000 / float64(requests)
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
	flagDenyTTL     = "authorization-webhook-cache-unauthorized-ttl"
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
		if _, errs, err, _ := burst(ctx, &fresh, conc, warm); errs > 0 {
			return nil, fmt.Errorf("warm-up of %s as a fresh caller: %d errors, first: %v", t.Name, errs, err)
		}
		c1, err := gw.authzCounts(ctx)
		if err != nil {
			return nil, err
		}
		n, _, _, _ := burst(ctx, &fresh, conc, window)
		c2, err := gw.authzCounts(ctx)
		if err != nil {
			return nil, err
		}
		t.FreshClient.CloseIdleConnections()
		s := &t.res.Steady
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
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(idle.Window):
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

// steadyWindow is the length of the windows after a fill (0 without any).
func (r *report) steadyWindow() time.Duration {
	for _, t := range r.Targets {
		if t.res.Steady.Window > 0 {
			return t.res.Steady.Window
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
		n, a := t.res.Requests, t.res.Authz
		if steady {
			n, a = t.res.Steady.Requests, t.res.Steady.authzDelta
		}
		requests += n
		sars += a.HubSARs
		delegated += a.Delegated
	}
	return requests, sars, delegated
}
