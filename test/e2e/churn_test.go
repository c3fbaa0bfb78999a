package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/generated/clientset/versioned"
)

// By default TestChurn runs enough cycles for a leak of one goroutine or
// fd per cycle to pass the drift allowed (churnEnough); `make soak` runs it
// alone for a long -churn.duration.
var (
	churnCycles   = flag.Int("churn.cycles", churnEnough, "TestChurn: stop after this many cycles (0: no limit; -churn.duration still applies)")
	churnDuration = flag.Duration("churn.duration", 0, "TestChurn: start no new cycle after this long (0: no limit; -churn.cycles still applies)")
	churnReport   = flag.Int("churn.report-every", 0, "TestChurn: log the figures every N cycles (0: only the baseline and the end)")
	churnProfiles = flag.String("churn.profiles", "", "TestChurn: write heap profiles at the baseline and at the end into this directory (compare with go tool pprof -base)")
)

// TestChurn proves that the gateway's request path leaks nothing under churn.
// It builds that path in this process (inTestGateway: informer cache, a pool
// of capacity 4 with a 1 s grace, the konnectivity Manager, the Proxy)
// against the real environment, takes a baseline after a warm-up cycle,
// then runs cycles of: create gateways (Direct X509 with impersonation,
// Direct bearer token, HTTP CONNECT and SOCKS5 proxy URLs, Konnectivity),
// requests, a watch and exec streams, rotation of the client certificate,
// the token, the CA bundle and the tunnel's credentials, eviction by
// capacity (more gateways than entries), and deletion. Afterwards it polls
// until goroutines, open fds, pool entries/streams/connections, tunnels and
// proxy-server connections, forward-proxy tunnels and the in-use heap are
// back at the baseline, and fails with the goroutines that were not there
// at the baseline if they are not.
func TestChurn(t *testing.T) {
	requireGateway(t)
	if *churnCycles == 0 && *churnDuration == 0 {
		t.Fatal("-churn.cycles=0 and -churn.duration=0: the churn would never end")
	}
	if *churnProfiles != "" {
		// Every allocation, so a profile diff shows small steady leaks too.
		defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
		runtime.MemProfileRate = 1
	}
	r := newChurnRun(t)

	// Warm-up: lazily started parts exist before the baseline, which is
	// taken once nothing is in use any more.
	r.cycle(t, 0)
	base := r.g.awaitBaseline(t, r.g.clean(t), nil)
	if t.Failed() {
		t.FailNow()
	}
	atBaseline := goleak.IgnoreCurrent()
	r.httpCarried, r.socksCarried = env.HTTPProxy.Carried(), env.SOCKS5Proxy.Carried()
	t.Logf("baseline after warm-up: %s", base)
	writeHeapProfile(t, "heap-baseline.pprof")

	start := time.Now()
	n := 0
	for (*churnDuration == 0 || time.Since(start) < *churnDuration) && (*churnCycles == 0 || n < *churnCycles) {
		n++
		r.cycle(t, n)
		if t.Failed() {
			t.FailNow()
		}
		if *churnReport > 0 && n%*churnReport == 0 {
			t.Logf("cycle %d (%s): %s", n, time.Since(start).Round(time.Second), r.g.figures(t, false))
		}
	}
	took := time.Since(start)

	end := r.g.awaitBaseline(t, base, atBaseline)
	writeHeapProfile(t, "heap-end.pprof")
	t.Logf("%d cycles in %s; with the warm-up: %s", n, took.Round(time.Second), r.counts)
	t.Logf("after churn, settled: %s", end)
	t.Logf("drift from baseline: goroutines %+d, fds %+d, heap %+.1f MiB; forward proxies carried http %d socks5 %d tunnels",
		end.Goroutines-base.Goroutines, end.FDs-base.FDs, (float64(end.HeapInUse)-float64(base.HeapInUse))/(1<<20),
		env.HTTPProxy.Carried()-r.httpCarried, env.SOCKS5Proxy.Carried()-r.socksCarried)

	// Fewer cycles could hide a leak of one goroutine or fd per cycle
	// within the drift allowed.
	if n < churnEnough {
		t.Errorf("%d cycles prove too little: a leak of one goroutine or fd per cycle shows only past the drift allowed (%d goroutines, %d fds); run at least %d", n, goroutineSlack, fdSlack, churnEnough)
	}

	// What the cycles must have exercised, read from the pool's own counters.
	st := end.Pool
	for reason, min := range map[string]int64{"rotated": int64(n), "evicted": 1, "deleted": int64(n)} {
		if got := st.Retired[reason] - base.Pool.Retired[reason]; got < min {
			t.Errorf("%d cycles retired %d entries as %s, want at least %d", n, got, reason, min)
		}
	}
	if r.g.tunnel != nil && end.Tunnel.Rotations-base.Tunnel.Rotations < int64(n) {
		t.Errorf("%d cycles rotated the tunnel %d times, want %d", n, end.Tunnel.Rotations-base.Tunnel.Rotations, n)
	}
	if env.HTTPProxy.Carried() == r.httpCarried || env.SOCKS5Proxy.Carried() == r.socksCarried {
		t.Errorf("the forward proxies carried no tunnel during the cycles")
	}
}

// churnRun is what stays across cycles.
type churnRun struct {
	g                         *inTestGateway
	gc                        versioned.Interface
	id                        string
	tokenOn                   kubernetes.Interface // managed-1, where the token gateways' ServiceAccount lives
	direct                    kubernetes.Interface // managed-1, for watch markers
	ns                        string
	created                   map[string]bool // gateways not yet deleted, for cleanup
	counts                    churnCounts
	httpCarried, socksCarried int64 // forward-proxy tunnels before the cycles
}

type churnCounts struct {
	Gateways, Requests, Watches, Execs, CutExecs, CertRotations, TokenRotations, CARotations, TunnelRotations, Deletes int
}

func (c churnCounts) String() string {
	return fmt.Sprintf("%d gateways created and deleted, %d requests, %d watches, %d exec streams (%d of them cut by a retirement), rotations: %d certificates, %d tokens, %d CA bundles, %d tunnel credentials",
		c.Gateways, c.Requests, c.Watches, c.Execs, c.CutExecs, c.CertRotations, c.TokenRotations, c.CARotations, c.TunnelRotations)
}

func newChurnRun(t *testing.T) *churnRun {
	t.Helper()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	r := &churnRun{
		g:       startInTestGateway(t),
		gc:      gatewayClient(t, env.Hub.Kubeconfig),
		id:      hex.EncodeToString(b),
		direct:  managedClient(t, 0),
		created: map[string]bool{},
	}
	r.tokenOn = ensureTokenIdentity(t, env.Managed[0])
	r.ns = "churn-" + r.id
	if _, err := r.direct.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for name := range r.created {
			if err := r.gc.GatewayV1alpha1().ClusterGateways().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete ClusterGateway %s: %v", name, err)
			}
		}
		_ = r.direct.CoreV1().Namespaces().Delete(context.Background(), r.ns, metav1.DeleteOptions{})
	})
	return r
}

// churnGateways are the gateways of one cycle, by role. Six with
// konnectivity, five without: more than the pool's capacity of four.
func (r *churnRun) churnGateways(t *testing.T, cycle int) map[string]*gatewayv1alpha1.ClusterGateway {
	name := func(role string) string { return fmt.Sprintf("churn-%s-%d-%s", r.id, cycle, role) }
	gws := map[string]*gatewayv1alpha1.ClusterGateway{}

	gws["x509"] = directGateway(name("x509"), 0)
	gws["x509"].Spec.Impersonation.Mode = gatewayv1alpha1.ImpersonationCaller
	gws["evict"] = directGateway(name("evict"), 1)
	gws["http"] = directGateway(name("http"), 1)
	gws["http"].Spec.Endpoint.ProxyURL = env.HTTPProxy.URL.String()
	gws["socks"] = directGateway(name("socks"), 0)
	gws["socks"].Spec.Endpoint.ProxyURL = env.SOCKS5Proxy.URL.String()
	m := env.Managed[0]
	gws["token"] = &gatewayv1alpha1.ClusterGateway{
		ObjectMeta: metav1.ObjectMeta{Name: name("token")},
		Spec: gatewayv1alpha1.ClusterGatewaySpec{
			Endpoint:   gatewayv1alpha1.Endpoint{Address: m.URL, CABundle: m.CA.CertPEM},
			Credential: gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialBearerToken, BearerToken: newToken(t, r.tokenOn)},
		},
	}
	if k := env.Konnectivity; k != nil {
		c := k.Cluster
		gws["konn"] = &gatewayv1alpha1.ClusterGateway{
			ObjectMeta: metav1.ObjectMeta{Name: name("konn")},
			Spec: gatewayv1alpha1.ClusterGatewaySpec{
				Endpoint: gatewayv1alpha1.Endpoint{Type: gatewayv1alpha1.EndpointKonnectivity, Address: c.URL, CABundle: c.CA.CertPEM},
				Credential: gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialX509Certificate,
					X509: &gatewayv1alpha1.X509Credential{Certificate: c.GatewayUser.CertPEM, PrivateKey: c.GatewayUser.KeyPEM}},
			},
		}
	}
	return gws
}

// request sends ordinary requests to a gateway through the in-test gateway.
func (r *churnRun) request(t *testing.T, name string) {
	t.Helper()
	cs := r.g.clientset(t, name)
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list pods through the in-test gateway %s: %v", name, err)
	}
	if len(pods.Items) == 0 {
		t.Fatalf("list pods through %s: no pods, want the demo pod", name)
	}
	if _, err := cs.Discovery().ServerVersion(); err != nil {
		t.Fatalf("GET /version through %s: %v", name, err)
	}
	r.counts.Requests += 2
}

// cycle runs one round of churn; see TestChurn.
func (r *churnRun) cycle(t *testing.T, i int) {
	t.Helper()
	g, gc := r.g, r.gc
	gws := r.churnGateways(t, i)
	roles := []string{"x509", "evict", "token", "http", "socks", "konn"}

	// Create, and use each once: six gateways through four entries evicts.
	for _, role := range roles {
		gw, ok := gws[role]
		if !ok {
			continue
		}
		out, err := gc.GatewayV1alpha1().ClusterGateways().Create(context.Background(), gw, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create ClusterGateway %s: %v", gw.Name, err)
		}
		r.created[gw.Name] = true
		r.counts.Gateways++
		g.waitSeen(t, gw.Name, out.ResourceVersion)
		r.request(t, gw.Name)
	}

	// Streams: a watch on the certificate gateway and exec streams on the
	// token gateway (which must survive its token rotation), on one of the
	// proxy gateways (alternating, and cut when its CA bundle rotates), and
	// through the tunnel (cut when the tunnel's credentials rotate).
	proto := streamProtocols[i%len(streamProtocols)]
	watched := gws["x509"].Name
	w := openWatch(t, g.clientset(t, watched), r.direct, r.ns, fmt.Sprintf("marker-%d", i))
	defer w.Stop()
	r.counts.Watches++
	proxied := gws[[]string{"http", "socks"}[i%2]]
	execs := map[string]*execStream{}
	defer func() { // on failure too: no kubectl outlives its cycle
		for _, s := range execs {
			s.kill()
		}
	}()
	for _, gw := range []*gatewayv1alpha1.ClusterGateway{gws["token"], proxied, gws["konn"]} {
		if gw != nil {
			execs[gw.Name] = startExecStream(t, g.kubeconfig(t, gw.Name), proto)
			r.counts.Execs++
		}
	}

	// Rotations, each followed by a request that picks the new shape up.
	// retiredAfter is when each rotation began: the entry (or tunnel) it
	// retires cannot have been retired before.
	retiredAfter := map[string]time.Time{watched: time.Now()}
	rv := updateGateway(t, gc, watched, func(gw *gatewayv1alpha1.ClusterGateway) {
		gw.Spec.Credential.X509 = newClientCert(t, env.Managed[0].CA)
	})
	g.waitSeen(t, watched, rv)
	r.request(t, watched)
	r.counts.CertRotations++

	token := gws["token"].Name
	rv = updateGateway(t, gc, token, func(gw *gatewayv1alpha1.ClusterGateway) {
		gw.Spec.Credential.BearerToken = newToken(t, r.tokenOn)
	})
	g.waitSeen(t, token, rv)
	r.request(t, token)
	r.counts.TokenRotations++

	cluster := env.Managed[1]
	if proxied == gws["socks"] {
		cluster = env.Managed[0]
	}
	retiredAfter[proxied.Name] = time.Now()
	rv = updateGateway(t, gc, proxied.Name, rotateCABundle(t, cluster))
	g.waitSeen(t, proxied.Name, rv)
	r.request(t, proxied.Name)
	r.counts.CARotations++

	if k := env.Konnectivity; k != nil {
		retiredAfter[gws["konn"].Name] = time.Now()
		g.rotateTunnelCredentials(t, k, i)
		r.request(t, gws["konn"].Name)
		r.counts.TunnelRotations++
	}

	// The streams of rotated entries are cut once the grace period is over:
	// the watch ends cleanly, and each exec stream's kubectl exits on its
	// own (the test neither closes its stdin nor kills it), no earlier than
	// the grace period after its rotation began. The token rotation kept its
	// entry, so that exec is still up and ends normally.
	if err := watchEnds(w, settleTimeout); err != nil {
		t.Fatalf("cycle %d: the watch on the rotated entry of %s: %v", i, watched, err)
	}
	if d := time.Since(retiredAfter[watched]); d < churnGrace {
		t.Errorf("cycle %d: the watch on the rotated entry of %s ended %s after the rotation began, before the %s grace period", i, watched, d, churnGrace)
	}
	var cut []string
	for name, s := range execs {
		if name == token {
			if err := s.echo("still-up"); err != nil {
				t.Fatalf("the exec stream of %s broke on a token rotation (which keeps the pooled transport): %v\nstderr:\n%s", token, err, s.stderr)
			}
			if err := s.finish(); err != nil {
				t.Fatalf("kubectl exec through %s did not end cleanly: %v\nstderr:\n%s", token, err, s.stderr)
			}
			continue
		}
		e := s.waitExit(settleTimeout)
		after := e.At.Sub(retiredAfter[name])
		switch {
		case e.Killed:
			t.Errorf("cycle %d: the exec stream of %s was not cut within %s of its rotation; the test killed it. stderr:\n%s", i, name, settleTimeout, s.stderr)
		case after < churnGrace:
			t.Errorf("cycle %d: the exec stream of %s ended %s after its rotation began, before the %s grace period: not by the cut (exit %v). stderr:\n%s", i, name, after, churnGrace, e.Err, s.stderr)
		default:
			cut = append(cut, fmt.Sprintf("%s after %s (exit %v)", name, after.Round(10*time.Millisecond), e.Err))
		}
	}
	if want := len(execs) - 1; len(cut) != want {
		t.Fatalf("cycle %d: %d of the %d exec streams of retired entries ended by the cut", i, len(cut), want)
	}
	r.counts.CutExecs += len(cut)
	t.Logf("cycle %d: %d exec streams of retired entries ended by the cut (grace %s): %s", i, len(cut), churnGrace, strings.Join(cut, "; "))

	// Delete them all; the cache's OnDelete retires their entries.
	for _, role := range roles {
		if gw, ok := gws[role]; ok {
			if err := gc.GatewayV1alpha1().ClusterGateways().Delete(context.Background(), gw.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatalf("delete ClusterGateway %s: %v", gw.Name, err)
			}
			delete(r.created, gw.Name)
			r.counts.Deletes++
		}
	}
	// Only this cycle's gateways were in the pool: every entry must go.
	eventually(t, fmt.Sprintf("cycle %d: the pool drops the entries of deleted gateways", i), func() error {
		if n := g.pool.Len(); n != 0 {
			return fmt.Errorf("%d live entries after all gateways were deleted", n)
		}
		return nil
	})
}
