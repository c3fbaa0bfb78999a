package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
	"github.com/clustergateway/cluster-gateway/internal/testmetrics"
)

// Delegated authorization: the gateway asks the hub with a
// SubjectAccessReview whether a caller may use clustergateways/proxy, and
// caches the answer for --authorization-webhook-cache-(un)authorized-ttl
// (10 s each by default). Each load counts both ends.
const (
	mDelegatedAuthz = "apiserver_delegated_authz_request_total" // gateway: SARs it sent, by code
	mHubRequests    = "apiserver_request_total"                 // hub: requests by resource, verb, code...
)

// authzCount is both counters at one moment: the hub's SubjectAccessReviews
// and the gateway's delegated authorization calls (all codes).
type authzCount struct{ HubSARs, Delegated float64 }

// authzDelta is what a load added to them.
type authzDelta struct{ HubSARs, Delegated float64 }

func (d *authzDelta) add(before, after authzCount) {
	d.HubSARs += after.HubSARs - before.HubSARs
	d.Delegated += after.Delegated - before.Delegated
}

// sumOf adds the samples of name over all its label sets.
func sumOf(m map[string]float64, name string) float64 { return testmetrics.Samples(m).Sum(name) }

// authzCounts reads both counters. Both scrapes are by system:masters users,
// whom neither authorizer asks about.
func (g *gatewayAdmin) authzCounts(ctx context.Context) (authzCount, error) {
	s, err := g.state(ctx)
	if err != nil {
		return authzCount{}, err
	}
	sars, err := g.hubSARs(ctx)
	return authzCount{HubSARs: sars, Delegated: s.Delegated}, err
}

// hubSARs sums the hub's apiserver_request_total{resource="subjectaccessreviews"}.
func (g *gatewayAdmin) hubSARs(context.Context) (float64, error) {
	m, err := testmetrics.Scrape(g.hub, g.env.Hub.URL+"/metrics")
	return sumPrefix(m, mHubRequests+"{", `resource="subjectaccessreviews"`), err
}

// The authorization cache's allowed TTL flag and its default.
const (
	flagAllowTTL    = "authorization-webhook-cache-authorized-ttl"
	defaultAuthzTTL = 10 * time.Second
)

// flagValue is the value of the last --name in args, or def.
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
// (cluster-gateway-bench-<load>) that no load uses, so that the first
// request of measureAuthzSteady's warm-up surely fills a decision. The
// binding is checked now, more than a TTL before that warm-up.
func freshCallers(ctx context.Context, env *localenv.Env, ts []*target) error {
	if *authzWindow <= 0 {
		return nil
	}
	args := []string{"create", "clusterrolebinding", benchUser + "-fresh:cluster-gateway:proxy-reader", "--clusterrole=cluster-gateway:proxy-reader"}
	users := map[string]*localenv.User{}
	for _, t := range ts {
		if t.TODO == "" && gatewayLoads[t.Key] {
			u, err := env.NewUser(benchUser + "-" + t.Key)
			if err != nil {
				return err
			}
			users[t.Key], args = u, append(args, "--user="+u.Name)
		}
	}
	if len(users) == 0 {
		return nil
	}
	if _, err := env.Kubectl(env.Hub.Kubeconfig, args...); err != nil {
		return err
	}
	for _, t := range ts {
		if u := users[t.Key]; u != nil {
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
	}
	return nil
}

// measureAuthzSteady loads each gateway path once more as its fresh caller:
// a warm-up whose first request fills the decision, then -authz-window
// (inside the TTL) in which it counts the reviews. (In the rounds a path's
// decision has usually expired since its previous round.) It returns the
// same counts over as long a time without load: reviews the loads did not
// cause.
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
		var c [3]authzCount
		var n int
		steps := []func() error{
			func() error {
				if b := burst(ctx, &fresh, conc, warm); b.errs > 0 {
					return fmt.Errorf("warm-up of %s as a fresh caller: %d errors, first: %v", t.Name, b.errs, b.firstErr)
				}
				return nil
			},
			func() error { n = burst(ctx, &fresh, conc, window).n; return nil },
		}
		if err := countAround(ctx, gw, c[:], steps...); err != nil {
			return nil, err
		}
		t.FreshClient.CloseIdleConnections()
		s := &t.Res.Steady
		s.Requests, s.Window, s.Filled = n, window, c[1].HubSARs-c[0].HubSARs
		s.add(c[1], c[2])
		logf("authorization after a fill, %-28s warm-up %.0f SubjectAccessReviews; then %d requests in %s, %.0f", t.Name, s.Filled, n, window, s.HubSARs)
	}
	idle := &authzSteady{Window: window * time.Duration(max(1, windows))} // as long as all the windows together
	var c [2]authzCount
	if err := countAround(ctx, gw, c[:], func() error { return sleep(ctx, idle.Window) }); err != nil {
		return nil, err
	}
	idle.add(c[0], c[1])
	logf("authorization without load: %.0f SubjectAccessReviews in %s", idle.HubSARs, idle.Window)
	return idle, nil
}

// countAround reads the counts into c before the first step and after each.
func countAround(ctx context.Context, gw *gatewayAdmin, c []authzCount, steps ...func() error) (err error) {
	if c[0], err = gw.authzCounts(ctx); err != nil {
		return err
	}
	for i, step := range steps {
		if err := step(); err != nil {
			return err
		}
		if c[i+1], err = gw.authzCounts(ctx); err != nil {
			return err
		}
	}
	return nil
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

// gatewayAuthz sums the requests and authorization counts of the loads
// through the gateway: of their rounds, or of their windows after a fill.
func (r *report) gatewayAuthz(steady bool) (requests int, sars, delegated float64) {
	for _, t := range r.Targets {
		if t.TODO != "" || !gatewayLoads[t.Key] {
			continue
		}
		n, a := t.Res.Requests, t.Res.Authz
		if steady {
			n, a = t.Res.Steady.Requests, t.Res.Steady.authzDelta
		}
		requests, sars, delegated = requests+n, sars+a.HubSARs, delegated+a.Delegated
	}
	return requests, sars, delegated
}

// AuthzTTL is the gateway's authorization cache TTL flag in the loads.
func (r *report) AuthzTTL(flag string) string {
	return flagValue(r.GatewayArgs, flag, defaultAuthzTTL.String()+", the default")
}
