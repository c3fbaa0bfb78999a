package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
)

// Flags of the rows added here, registered beside main's.
var (
	manyWorkers = flag.Int("workers-many", 64, "keep-alive workers of the extra direct, bare and gateway-port loads that show whether one HTTP/2 connection to a cluster limits (0: no such loads)")
	onlyTargets = flag.String("loads", "", "comma-separated loads to run, of "+strings.Join(targetKeys, ",")+" (empty: all)")
)

// targetKeys are the loads buildTargets and extendTargets make.
var targetKeys = []string{"direct", "bare", "gateway", "hub", "hub-bare", "konn", "direct3", "bare-konn", "direct-many", "bare-many", "gateway-many"}

// benchUser is who the gateway paths' loads authenticate as: a hub user
// outside system:masters, bound to cluster-gateway:proxy-reader, so that the
// gateway's delegated authorizer really decides (and caches) each request,
// as it does for real users. The hub admin is always allowed without a
// SubjectAccessReview, which would hide that cost.
const benchUser = "cluster-gateway-bench"

// extendTargets runs the gateway paths as benchUser, adds the loads with
// -workers-many workers (direct, bare and gateway port to managed-1, over
// the same clients, hence still one HTTP/2 connection per client), and
// keeps only the -loads loads.
func extendTargets(ctx context.Context, env *localenv.Env, ts []*target) ([]*target, error) {
	user, err := env.NewUser(benchUser)
	if err != nil {
		return nil, err
	}
	for _, role := range []string{"cluster-gateway:proxy-reader", bareRole} {
		if _, err := env.Kubectl(env.Hub.Kubeconfig, "create", "clusterrolebinding", benchUser+":"+role,
			"--clusterrole="+role, "--user="+benchUser); err != nil {
			return nil, err
		}
	}
	gwClient, err := mtlsClient(env.Gateway.CA.CertPEM, user.Cert)
	if err != nil {
		return nil, err
	}
	hubClient, err := mtlsClient(env.Hub.CA.CertPEM, user.Cert)
	if err != nil {
		return nil, err
	}
	for _, t := range ts {
		switch t.Key {
		case "gateway", "konn":
			t.Client = gwClient
		case "hub", "hub-bare":
			t.Client = hubClient
		default:
			continue
		}
		if t.TODO == "" {
			if err := waitAllowed(ctx, t); err != nil {
				return nil, err
			}
		}
	}
	if n := *manyWorkers; n > 0 {
		for _, key := range []string{"direct", "bare", "gateway"} {
			i := slices.IndexFunc(ts, func(t *target) bool { return t.Key == key })
			if i < 0 {
				continue
			}
			many := *ts[i]
			many.Key, many.Name, many.Workers = key+"-many", fmt.Sprintf("%s, %d workers", many.Name, n), n
			ts = append(ts, &many)
		}
	}
	if *onlyTargets != "" {
		keep := strings.Split(*onlyTargets, ",")
		for _, k := range keep {
			if !slices.Contains(targetKeys, k) {
				return nil, fmt.Errorf("-loads: no load %q (have %s)", k, strings.Join(targetKeys, ","))
			}
		}
		// A copy: DeleteFunc clears the tail, and buildTargets' closer still ranges over it.
		ts = slices.DeleteFunc(slices.Clone(ts), func(t *target) bool { return !slices.Contains(keep, t.Key) })
	}
	if err := freshCallers(ctx, env, ts); err != nil {
		return nil, err
	}
	return ts, nil
}

// waitAllowed waits until benchUser's RoleBinding has reached the hub's
// authorizer and t answers.
func waitAllowed(ctx context.Context, t *target) error {
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		last = get(ctx, t.Client, t.URL)
		return last == nil, nil
	}); err != nil {
		return fmt.Errorf("%s as %s: %w", t.Name, benchUser, cmp.Or(last, err))
	}
	return nil
}

// Per-cluster limits of the gateway: ordinary requests in flight to one
// cluster (default 16), and more waiting (default 32); beyond both it
// answers 429.
const (
	flagMaxPerCluster    = "max-requests-per-cluster"
	defaultMaxPerCluster = 16
)

// workersGatewayArgs raises the gateway's in-flight bound per cluster to the
// most workers of any load, so that the -workers-many loads to one cluster
// show what its one HTTP/2 connection allows rather than the limiter (with
// the defaults, 64 workers would get 429s beyond 16 + 32). Loads with fewer
// workers than the default bound are not affected.
func workersGatewayArgs(conc int) []string {
	n := max(conc, *manyWorkers)
	if n <= defaultMaxPerCluster {
		return nil
	}
	return []string{fmt.Sprintf("--%s=%d", flagMaxPerCluster, n)}
}

// workersOf is the workers of t's load.
func workersOf(t *target, def int) int {
	if t.Workers > 0 {
		return t.Workers
	}
	return def
}
