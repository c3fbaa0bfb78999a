package proxy

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/clustergateway/cluster-gateway/internal/testgateways"
	"github.com/clustergateway/cluster-gateway/internal/testpki"
	"github.com/clustergateway/cluster-gateway/pkg/clusters"
	"github.com/clustergateway/cluster-gateway/pkg/credentials"
	"github.com/clustergateway/cluster-gateway/pkg/endpointpolicy"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
	"github.com/clustergateway/cluster-gateway/pkg/health"
	"github.com/clustergateway/cluster-gateway/pkg/pool"
)

const fixtureNamespace = "cluster-gateway-system"

// newFixtureProxy is the real request path (informer cache, pool, Proxy)
// over gateway Secrets held by a fake clientset: the hub is not what these
// tests are about. Everything started is stopped at cleanup.
func newFixtureProxy(t *testing.T, secrets ...*corev1.Secret) *Proxy {
	t.Helper()
	return newFixtureProxyWith(t, nil, secrets...)
}

// newFixtureProxyWith is newFixtureProxy with its Config changed by mutate.
func newFixtureProxyWith(t testing.TB, mutate func(*Config), secrets ...*corev1.Secret) *Proxy {
	t.Helper()
	opts := Config{
		Pool:       newTestPool(t, 4, 2*time.Second, nil),
		Authorizer: authorizerfactory.NewAlwaysAllowAuthorizer(),
	}
	if mutate != nil {
		mutate(&opts)
	}
	px, err := newWired(t, startStore(t, fixtureNamespace, secrets...), opts)
	if err != nil {
		t.Fatal(err)
	}
	return px
}

// newWired is New over store as pkg/apiserver wires it: the clusters'
// records over the store and opts.Pool (and opts' tunnel), which the proxy
// leases through.
func newWired(t testing.TB, store *gateways.Store, opts Config) (*Proxy, error) {
	t.Helper()
	px, _, err := newWiredProbed(t, store, opts, nil)
	return px, err
}

// newWiredProbed is newWired with, when hopts is set, a prober over the
// records that probes through the proxy's ProbeCluster and that the proxy
// reads; the caller runs it.
func newWiredProbed(t testing.TB, store *gateways.Store, opts Config, hopts *health.Config) (*Proxy, *health.Prober, error) {
	t.Helper()
	return newWiredAll(t, store, nil, opts, hopts)
}

// newWiredProviders is newWired with the credential providers the records
// run for Provider gateways.
func newWiredProviders(t testing.TB, store *gateways.Store, providers *credentials.Providers, opts Config) (*Proxy, error) {
	t.Helper()
	px, _, err := newWiredAll(t, store, providers, opts, nil)
	return px, err
}

func newWiredAll(t testing.TB, store *gateways.Store, providers *credentials.Providers, opts Config, hopts *health.Config) (*Proxy, *health.Prober, error) {
	t.Helper()
	var px *Proxy
	copts := clusters.Config{Store: store, Pool: opts.Pool, Providers: providers, Limiter: opts.Limiter}
	owner, err := clusters.New(copts)
	if err != nil {
		return nil, nil, err
	}
	var prober *health.Prober
	if hopts != nil {
		if prober, err = health.New(*hopts, owner, func(ctx context.Context, name string) health.Outcome { return px.ProbeCluster(ctx, name) }); err != nil {
			return nil, nil, err
		}
		opts.Health = prober
	}
	opts.Clusters = owner
	px, err = New(opts)
	return px, prober, err
}

// startStore runs a gateway store over the Secrets, held by a fake
// clientset, until the test ends.
func startStore(t testing.TB, namespace string, secrets ...*corev1.Secret) *gateways.Store {
	t.Helper()
	objs := make([]runtime.Object, 0, len(secrets))
	for _, s := range secrets {
		objs = append(objs, s)
	}
	return runStore(t, namespace, fake.NewClientset(objs...))
}

// runStore runs a gateway store over client's Secrets until the test ends,
// for tests that change the Secrets through client.
func runStore(t testing.TB, namespace string, client kubernetes.Interface) *gateways.Store {
	t.Helper()
	return runGatewayStore(t, gateways.NewStore(client, namespace))
}

// runGatewayStore runs store until the test ends, once it has synced.
func runGatewayStore(t testing.TB, store *gateways.Store) *gateways.Store {
	t.Helper()
	testgateways.Run(t, store.Run, "the store syncs", store.HasSynced)
	return store
}

// newTestPool is a pool with the default Config but these, closed at the end.
func newTestPool(t testing.TB, capacity int, dialTimeout time.Duration, endpoints *endpointpolicy.Policy) *pool.Pool {
	t.Helper()
	o := pool.DefaultConfig()
	o.Capacity, o.DialTimeout, o.Endpoints = capacity, dialTimeout, endpoints
	p, err := pool.New(*o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// tokenSecret is a BearerToken gateway Secret for endpoint, trusting caPEM.
func tokenSecret(name, endpoint string, caPEM []byte, token, impersonation string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: fixtureNamespace, ResourceVersion: "1", UID: types.UID("uid-" + name),
			Labels: map[string]string{gateways.LabelGateway: "true"}},
		Data: map[string][]byte{
			gateways.KeyEndpoint:       []byte(endpoint),
			gateways.KeyCABundle:       caPEM,
			gateways.KeyCredentialType: []byte("BearerToken"),
			gateways.KeyToken:          []byte(token),
			gateways.KeyImpersonation:  []byte(impersonation),
		},
	}
}

// upstreamCA is the PEM of the CA that issued an upstream's certificate
// (newTLSUpstream sends it last in the chain): the CA bundle that trusts that
// upstream and no other.
func upstreamCA(srv *httptest.Server) []byte {
	chain := srv.TLS.Certificates[0].Certificate
	return testpki.PEM("CERTIFICATE", chain[len(chain)-1])
}

// newTLSUpstream is an HTTPS server on 127.0.0.1 with a CA of its own
// (httptest's built-in certificate is shared by all servers, so a gateway
// trusting one upstream would trust them all), closed at cleanup.
func newTLSUpstream(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	return newTLSUpstreamAsking(t, h, tls.NoClientCert)
}

// newTLSUpstreamAsking is newTLSUpstream with a policy for client
// certificates: tls.RequestClientCert lets the handler see the certificate
// an X.509 gateway presents (r.TLS.PeerCertificates).
func newTLSUpstreamAsking(t testing.TB, h http.Handler, clientAuth tls.ClientAuthType) *httptest.Server {
	t.Helper()
	ca := testpki.MustCA(t, "upstream-ca")
	serving := ca.MustIssue(t, testpki.Spec{CommonName: "upstream", IPs: []string{"127.0.0.1"}, Server: true}).TLS()
	serving.Certificate = append(serving.Certificate, ca.Cert.Raw)
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{serving}, ClientAuth: clientAuth}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// serveAs sends req through the proxy for gateway name as the hub user u.
func serveAs(px *Proxy, name, subpath string, u user.Info, req *http.Request) *httptest.ResponseRecorder {
	ctx := req.Context()
	if u != nil {
		ctx = apirequest.WithUser(ctx, u)
	}
	rec := httptest.NewRecorder()
	px.Handler(name, subpath).ServeHTTP(rec, req.WithContext(ctx))
	return rec
}

// closedAddress is an https URL on loopback where nothing listens (a port
// that was just bound and released): a dial there is refused.
func closedAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "https://" + l.Addr().String()
}
