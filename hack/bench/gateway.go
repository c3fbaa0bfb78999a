package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
	"github.com/clustergateway/cluster-gateway/internal/testmetrics"
)

// Gateway metrics read before and after every load.
const (
	mCreations  = "cluster_gateway_pool_entry_creations_total"
	mDials      = "cluster_gateway_pool_connection_dials_total"
	mTunnels    = "cluster_gateway_konnectivity_tunnel_builds_total"
	mEntries    = "cluster_gateway_pool_entries"
	mRetiring   = "cluster_gateway_pool_retiring_entries"
	mOpenConns  = "cluster_gateway_pool_open_connections"
	mGoroutines = "go_goroutines"
	mHeapInuse  = "go_memstats_heap_inuse_bytes"
	mHeapAlloc  = "go_memstats_heap_alloc_bytes"
	mStackInuse = "go_memstats_stack_inuse_bytes"
	mProbes     = "cluster_gateway_health_probes_total"
	mClusters   = "cluster_gateway_health_clusters"
	mMallocs    = "go_memstats_mallocs_total"
	mAllocBytes = "go_memstats_alloc_bytes_total"
)

// gatewayAdmin talks to the gateway's own port as the hub admin
// (system:masters: its scrapes cause no SubjectAccessReview).
type gatewayAdmin struct {
	env    *localenv.Env
	client *http.Client
	hub    *http.Client // the hub kube-apiserver as its admin, for its /metrics (sar.go)
}

func newGatewayAdmin(env *localenv.Env) (*gatewayAdmin, error) {
	c, err := mtlsClient(env.Gateway.CA.CertPEM, env.Hub.Admin)
	if err != nil {
		return nil, err
	}
	hub, err := mtlsClient(env.Hub.CA.CertPEM, env.Hub.Admin)
	return &gatewayAdmin{env: env, client: c, hub: hub}, err
}

// mtlsClient is a keep-alive HTTP/2 client trusting caPEM and presenting
// the key pair, like client-go: all workers share its connection.
func mtlsClient(caPEM []byte, kp *localenv.KeyPair) (*http.Client, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificate in CA bundle")
	}
	cfg := &tls.Config{RootCAs: roots}
	if kp != nil {
		pair, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return &http.Client{Timeout: time.Minute, Transport: clientTransport(cfg)}, nil
}

// clientTransport is the clients' keep-alive HTTP/2 transport.
func clientTransport(cfg *tls.Config) *http.Transport {
	return &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}
}

// metrics scrapes /metrics into name{labels} -> value.
func (g *gatewayAdmin) metrics(ctx context.Context) (map[string]float64, error) {
	body, err := g.get(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	return testmetrics.Parse(strings.NewReader(body))
}

// gc makes the gateway run a garbage collection (the generic server's
// /debug/pprof/heap?gc=1) so heap numbers are not GC-timing noise, and
// saves the heap profile it returns to save, if set.
func (g *gatewayAdmin) gc(ctx context.Context, save string) error {
	body, err := g.get(ctx, "/debug/pprof/heap?gc=1")
	if err != nil || save == "" {
		return err
	}
	return os.WriteFile(save, []byte(body), 0o644)
}

// cpuProfile saves a CPU profile of the gateway taken over d (-gateway-profile).
func (g *gatewayAdmin) cpuProfile(ctx context.Context, d time.Duration, path string) error {
	body, err := g.get(ctx, fmt.Sprintf("/debug/pprof/profile?seconds=%d", max(1, int(d.Seconds()))))
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(body), 0o644)
}

// withCPUProfile runs f while the gateway is CPU-profiled for d into path.
func (g *gatewayAdmin) withCPUProfile(ctx context.Context, d time.Duration, path string, f func() error) error {
	prof := make(chan error, 1)
	go func() { prof <- g.cpuProfile(ctx, d, path) }()
	return errors.Join(f(), <-prof)
}

// profiled is withCPUProfile with a heap profile right before and after
// (allocPath): what the gateway allocated meanwhile.
func (g *gatewayAdmin) profiled(ctx context.Context, d time.Duration, path string, f func() error) error {
	if err := g.gc(ctx, allocPath(path, "before")); err != nil {
		return err
	}
	if err := g.withCPUProfile(ctx, d, path, f); err != nil {
		return err
	}
	logf("gateway CPU profile written to %s", path)
	return g.gc(ctx, allocPath(path, "after"))
}

func (g *gatewayAdmin) get(ctx context.Context, path string) (string, error) {
	resp, err := getOK(ctx, g.client, g.env.Gateway.URL+path, "")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// getOK GETs url, accepting accept if set, and returns the answer when it is
// 200 OK, else an error with its status and the start of its body.
func getOK(ctx context.Context, c *http.Client, url, accept string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	return resp, nil
}

// gwState is the gateway process at one moment.
type gwState struct {
	RSS, Heap, Goroutines        float64
	Creations, Dials, Tunnels    float64
	Entries, Retiring, OpenConns float64
	Delegated                    float64 // authorization calls to the hub (sar.go)
	Mallocs, AllocBytes          float64 // heap objects allocated since the start, and their bytes
}

func (g *gatewayAdmin) state(ctx context.Context) (gwState, error) {
	m, err := g.metrics(ctx)
	if err != nil {
		return gwState{}, err
	}
	rss, err := procRSS(g.env.Gateway.Process.Pid())
	return stateOf(m, rss), err
}

func stateOf(m map[string]float64, rss float64) gwState {
	return gwState{
		RSS: rss, Heap: m[mHeapInuse], Goroutines: m[mGoroutines],
		Creations: m[mCreations], Dials: m[mDials], Tunnels: m[mTunnels],
		Entries: m[mEntries], Retiring: m[mRetiring], OpenConns: m[mOpenConns],
		Delegated: sumOf(m, mDelegatedAuthz), Mallocs: m[mMallocs], AllocBytes: m[mAllocBytes],
	}
}

// memState is gwState plus the live heap: Live is heap_alloc (after a forced
// GC, what survived it; heap in use also counts spans' free room), Marked
// what the last GC marked (go_gc_heap_live_bytes: it does not grow with what
// is allocated after the GC, nor depend on GOGC).
type memState struct {
	gwState
	Live, Marked float64
	RSSFile      float64 // of RSS, the pages mapped from files (the binary's code and data)
}

func readMem(ctx context.Context, gw *gatewayAdmin) (memState, error) {
	m, err := gw.metrics(ctx)
	if err != nil {
		return memState{}, err
	}
	pid := gw.env.Gateway.Process.Pid()
	rss, err := procRSS(pid)
	if err != nil {
		return memState{}, err
	}
	rssFile, err := procStatus(pid, "RssFile")
	if err != nil {
		return memState{}, err
	}
	marked, ok := m["go_gc_heap_live_bytes"]
	if !ok {
		return memState{}, errors.New("the gateway's /metrics has no go_gc_heap_live_bytes (the Go runtime's /gc/heap/live:bytes): the live heap cannot be read")
	}
	return memState{Live: m[mHeapAlloc], Marked: marked, RSSFile: rssFile, gwState: stateOf(m, rss)}, nil
}

// kit makes the clients and bare proxies of a section and stops them all.
type kit struct {
	ctx     context.Context
	bares   []*bareProxy
	clients []*http.Client
	errs    []error // of the clients made: err joins them
}

// client is mtlsClient's client, or nil with its error kept for err.
func (k *kit) client(caPEM []byte, kp *localenv.KeyPair) *http.Client {
	c, err := mtlsClient(caPEM, kp)
	if k.errs = append(k.errs, err); err == nil {
		k.clients = append(k.clients, c)
	}
	return c
}

// bare starts a bare proxy (startBareProxy), to be stopped with the kit.
func (k *kit) bare(c *localenv.Cluster, konn *localenv.Konnectivity, aggregated bool) (*bareProxy, error) {
	p, err := startBareProxy(k.ctx, c, konn, aggregated)
	if err == nil {
		k.bares = append(k.bares, p)
	}
	return p, err
}

func (k *kit) err() error { return errors.Join(k.errs...) }

// stop stops the bare proxies and closes the clients' connections.
func (k *kit) stop() error {
	var errs []error
	for _, p := range k.bares {
		errs = append(errs, p.stop())
	}
	for _, c := range k.clients {
		c.CloseIdleConnections()
	}
	k.bares, k.clients = nil, nil
	return errors.Join(errs...)
}

// numbered is n names prefix-1 … prefix-n.
func numbered(prefix string, n int) (names []string) {
	for i := range n {
		names = append(names, fmt.Sprintf("%s-%d", prefix, i+1))
	}
	return names
}

// streamLimits are args with the gateway's stream limits raised to n per
// cluster and per user and cluster.
func streamLimits(args []string, n int) []string {
	return append(slices.Clone(args), fmt.Sprintf("--max-streams-per-cluster=%d", n), fmt.Sprintf("--max-streams-per-user-per-cluster=%d", n))
}

// newUsers issues hub users and binds them all to role in one
// ClusterRoleBinding named binding.
func newUsers(env *localenv.Env, binding, role string, names ...string) ([]*localenv.User, error) {
	args := []string{"create", "clusterrolebinding", binding, "--clusterrole=" + role}
	var users []*localenv.User
	for _, n := range names {
		u, err := env.NewUser(n)
		if err != nil {
			return nil, err
		}
		users, args = append(users, u), append(args, "--user="+n)
	}
	_, err := env.Kubectl(env.Hub.Kubeconfig, args...)
	return users, err
}
