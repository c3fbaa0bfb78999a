package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
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
	mStackInuse = "go_memstats_stack_inuse_bytes"
	mProbes     = "cluster_gateway_health_probes_total"
	mClusters   = "cluster_gateway_health_clusters"
	mMallocs    = "go_memstats_mallocs_total"
	mAllocBytes = "go_memstats_alloc_bytes_total"
)

// gatewayAdmin talks to the gateway's own port as the hub admin, whom the
// gateway authenticates with the hub's client CA (system:masters is always
// allowed by its delegated authorizer, so its scrapes cause no
// SubjectAccessReview; the loads run as a user who is not, see workers.go).
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
	if err != nil {
		return nil, err
	}
	return &gatewayAdmin{env: env, client: c, hub: hub}, nil
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
	return &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		TLSClientConfig: cfg, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second,
	}}, nil
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

func (g *gatewayAdmin) get(ctx context.Context, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.env.Gateway.URL+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := g.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET gateway %s: %s: %.200s", path, resp.Status, b)
	}
	return string(b), nil
}

// gwState is the gateway process at one moment.
type gwState struct {
	RSS        float64
	Heap       float64
	Goroutines float64
	Creations  float64
	Dials      float64
	Tunnels    float64
	Entries    float64
	Retiring   float64
	OpenConns  float64
	Delegated  float64 // authorization calls to the hub (sar.go)
	Mallocs    float64 // heap objects allocated since the start
	AllocBytes float64 // and their bytes
}

func (g *gatewayAdmin) state(ctx context.Context) (gwState, error) {
	m, err := g.metrics(ctx)
	if err != nil {
		return gwState{}, err
	}
	rss, err := procRSS(g.env.Gateway.Process.Pid())
	if err != nil {
		return gwState{}, err
	}
	return gwState{
		RSS: rss, Heap: m[mHeapInuse], Goroutines: m[mGoroutines],
		Creations: m[mCreations], Dials: m[mDials], Tunnels: m[mTunnels],
		Entries: m[mEntries], Retiring: m[mRetiring], OpenConns: m[mOpenConns],
		Delegated: sumOf(m, mDelegatedAuthz),
		Mallocs:   m[mMallocs], AllocBytes: m[mAllocBytes],
	}, nil
}
