package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authorization/authorizerfactory"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
	"github.com/clustergateway/cluster-gateway/internal/testfrontend"
	"github.com/clustergateway/cluster-gateway/pkg/clusters"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
	"github.com/clustergateway/cluster-gateway/pkg/pool"
	"github.com/clustergateway/cluster-gateway/pkg/pool/konnectivity"
	"github.com/clustergateway/cluster-gateway/pkg/proxy"
)

// The in-test gateway is small and quick to retire, so that a few gateways
// per cycle exceed its capacity and every retirement ends within the test.
// It never retires idle entries: the janitor would reclaim an entry that a
// broken deletion path left behind, and hide the leak (the gateway's own
// default is 30 minutes).
const (
	churnCapacity = 4
	churnGrace    = time.Second
	churnReadIdle = 5 * time.Second
)

// churnUser is who every request to the in-test gateway is served as; it is
// what gateways with impersonation Caller make the managed cluster see.
var churnUser = &user.DefaultInfo{Name: "churn-tester", Groups: []string{"system:masters", user.AllAuthenticated}}

// inTestGateway is the gateway's own request path, built in this process so
// that its goroutines, descriptors and heap can be measured: the informer
// cache over the hub's gateway Secrets, a small pool, the konnectivity
// Manager (when the environment has a proxy-server) and the Proxy, served
// over TLS by httptest. Everything it reaches is real (the hub, the managed
// kube-apiservers, the forward proxies, the proxy-server and agent). What
// the generic API server does before the proxy handler (authentication,
// authorization, the aggregator) is not part of it: internal/testfrontend
// stands in.
type inTestGateway struct {
	store  *gateways.Store
	pool   *pool.Pool
	tunnel *konnectivity.Manager // nil without konnectivity
	// The tunnel's own copy of the gateway's konnectivity client material,
	// so rotating it touches neither the real gateway nor other tests.
	tunnelCA, tunnelCert, tunnelKey string
	proxy                           *proxy.Proxy
	srv                             *testfrontend.Server
	client                          *http.Client // the test's one client of srv: connections are reused
	kubeconfigDir                   string
	stop                            func()
}

// startInTestGateway wires the request path as pkg/apiserver does and stops
// all of it when the test ends.
func startInTestGateway(t *testing.T) *inTestGateway {
	t.Helper()
	hub, err := kubernetes.NewForConfig(env.Hub.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &inTestGateway{kubeconfigDir: t.TempDir()}
	g.store = gateways.NewStore(hub, localenv.GatewayNamespace)
	po := pool.DefaultConfig()
	po.Capacity, po.RetireGrace, po.DialTimeout = churnCapacity, churnGrace, 5*time.Second
	// No idle retirement: it would reclaim what a broken deletion leaves.
	po.IdleTTL = 0
	// golang.org/x/net/http2 leaves a closed ClientConn reachable from its
	// health-check timer until that fires (ReadIdleTimeout after the last
	// frame): with the 30 s default the last 30 s of churn would still be on
	// the heap when it is measured.
	po.HTTP2ReadIdleTimeout, po.HTTP2PingTimeout = churnReadIdle, 2*time.Second
	if g.pool, err = pool.New(*po); err != nil {
		t.Fatal(err)
	}
	// The churn is about lifecycles, not RBAC: the real gateway's
	// authorization is tested through the hub elsewhere.
	copts := clusters.Config{Store: g.store, Pool: g.pool}
	if k := env.Konnectivity; k != nil {
		g.tunnel = g.startTunnel(t, ctx, k)
		copts.Tunnel = g.tunnel
	}
	// As in the gateway, the clusters' records follow the store: a deleted
	// gateway's pooled transport is retired by its deletion step.
	owner, err := clusters.New(copts)
	if err != nil {
		t.Fatal(err)
	}
	opts := proxy.Config{Clusters: owner, Pool: g.pool, Authorizer: authorizerfactory.NewAlwaysAllowAuthorizer()}
	if g.proxy, err = proxy.New(opts); err != nil {
		t.Fatal(err)
	}
	cacheDone := make(chan struct{})
	go func() { defer close(cacheDone); g.store.Run(ctx) }()

	// As the generic server: HTTP/2, and HTTP/1.1 for upgrades.
	if g.srv, err = testfrontend.Start(testfrontend.Handler(g.proxy, churnUser)); err != nil {
		cancel()
		<-cacheDone
		t.Fatal(err)
	}
	g.client = g.srv.Client()
	g.stop = func() {
		g.client.CloseIdleConnections()
		g.srv.Close()
		g.pool.Close()
		if g.tunnel != nil {
			g.tunnel.Stop()
		}
		cancel()
		<-cacheDone
	}
	t.Cleanup(g.stop)
	eventually(t, "the in-test gateway's store syncs with the hub", func() error {
		if !g.store.HasSynced() {
			return fmt.Errorf("not synced")
		}
		return nil
	})
	return g
}

// startTunnel builds a konnectivity Manager from a copy of the gateway's
// client material and waits for its first tunnel.
func (g *inTestGateway) startTunnel(t *testing.T, ctx context.Context, k *localenv.Konnectivity) *konnectivity.Manager {
	t.Helper()
	dir := t.TempDir()
	g.tunnelCA, g.tunnelCert, g.tunnelKey = filepath.Join(dir, "ca.crt"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for src, dst := range map[string]string{k.CAFile: g.tunnelCA, k.CertFile: g.tunnelCert, k.KeyFile: g.tunnelKey} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	m, err := konnectivity.New(konnectivity.Config{
		Addresses: k.ServerAddresses(), CAFile: g.tunnelCA, CertFile: g.tunnelCert, KeyFile: g.tunnelKey,
		ReloadInterval: 200 * time.Millisecond, RetireGrace: churnGrace, DialTimeout: 5 * time.Second,
		HealthInterval: time.Second, HealthTimeout: time.Second, HealthFailureThreshold: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	m.Start(ctx)
	eventually(t, "the in-test tunnel to the proxy-server is up", func() error {
		if s := m.Stats(); s.OpenTunnels < 1 {
			return fmt.Errorf("open tunnels %d, builds %d, failures %d", s.OpenTunnels, s.TunnelBuilds, s.TunnelBuildFailures)
		}
		return nil
	})
	return m
}

// clientset is a client of gateway name through the in-test gateway.
func (g *inTestGateway) clientset(t *testing.T, name string) kubernetes.Interface {
	t.Helper()
	cfg := &rest.Config{Host: g.srv.ProxyURL(name), QPS: -1}
	cs, err := kubernetes.NewForConfigAndClient(cfg, g.client)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// kubeconfig is for kubectl against gateway name through the in-test gateway.
// It carries a token only because kubectl prompts for a password without
// any credential; the front end ignores it and the proxy strips it.
func (g *inTestGateway) kubeconfig(t *testing.T, name string) string {
	t.Helper()
	return kubeconfigFile(t, filepath.Join(g.kubeconfigDir, name+".kubeconfig"), g.srv.ProxyURL(name), g.srv.CAPEM,
		&clientcmdapi.AuthInfo{Token: "unused-by-the-in-test-gateway"})
}

// waitSeen waits until the in-test store holds gateway name at resourceVersion rv.
func (g *inTestGateway) waitSeen(t *testing.T, name, rv string) {
	t.Helper()
	eventually(t, "the in-test store sees "+name+" at resourceVersion "+rv, func() error {
		gw, err := g.store.Get(name)
		if err != nil {
			return err
		}
		if gw.Object.ResourceVersion != rv {
			return fmt.Errorf("at %s", gw.Object.ResourceVersion)
		}
		return nil
	})
}
