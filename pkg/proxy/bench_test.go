package proxy

// Benchmarks of the proxied request path, side by side against one in-process
// upstream (TLS, HTTP/2, client-certificate auth like a kube-apiserver):
//
//	BenchmarkDirect             client -> upstream
//	BenchmarkBareReverseProxy   client -> httputil.ReverseProxy (one shared transport) -> upstream
//	BenchmarkProxyGateway       client -> Proxy.Serve (real cache, real pool) -> upstream
//
// Every hop is real TLS over loopback with keep-alive HTTP/2 clients. The
// gateway's front end (internal/testfrontend) sets the user and RequestInfo
// as the generic server's filters would, but runs no authentication or
// authorization: hack/bench measures the whole gateway process behind the
// real hub. `make bench`
// runs these in one invocation and prints the ratios.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"golang.org/x/net/http2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"

	"github.com/clustergateway/cluster-gateway/internal/testfrontend"
	"github.com/clustergateway/cluster-gateway/internal/testpki"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
	"github.com/clustergateway/cluster-gateway/pkg/pool"
	"github.com/clustergateway/cluster-gateway/pkg/tracing"
)

const (
	benchNamespace = "cluster-gateway-system"
	benchCluster   = "bench"
	benchListPods  = 100 // pods in the list body (about 50 KiB of JSON)
)

// benchPaths are the proxied requests: a single-object GET and a list.
var benchPaths = []struct{ name, path string }{
	{"get", "/api/v1/namespaces/default"},
	{"list", "/api/v1/namespaces/default/pods"},
}

// benchUpstream is a kube-apiserver stand-in that answers from memory,
// with one managed cluster's PKI: a CA, a serving certificate for 127.0.0.1
// and the gateway's client certificate.
type benchUpstream struct {
	ca     *testpki.CA
	client *testpki.Pair
	srv    *httptest.Server
}

func newBenchUpstream(b *testing.B) *benchUpstream {
	b.Helper()
	ca := testpki.MustCA(b, "bench-ca")
	serving := ca.MustIssue(b, testpki.Spec{CommonName: "kube-apiserver", IPs: []string{"127.0.0.1"}, Server: true})
	client := ca.MustIssue(b, testpki.Spec{CommonName: "gateway", Organization: []string{"system:masters"}, Client: true})
	ns, _ := json.Marshal(&corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: "default", UID: "6f1d2c1e-4e0b-4a43-9d1b-0c5c2d9b1a10", ResourceVersion: "42", Labels: map[string]string{"kubernetes.io/metadata.name": "default"}},
		Spec:       corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{"kubernetes"}},
		Status:     corev1.NamespaceStatus{Phase: corev1.NamespaceActive},
	})
	list := &corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}, ListMeta: metav1.ListMeta{ResourceVersion: "42"}}
	for i := range benchListPods {
		list.Items = append(list.Items, corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%03d", i), Namespace: "default", UID: "uid", ResourceVersion: "42", Labels: map[string]string{"app": "bench"}},
			Spec:       corev1.PodSpec{NodeName: "fake-node", Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:v1", Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}}},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true, Image: "registry.example/app:v1"}}},
		})
	}
	pods, _ := json.Marshal(list)
	bodies := map[string][]byte{benchPaths[0].path: ns, benchPaths[1].path: pods}

	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := bodies[r.URL.Path]
		if !ok || r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "unknown path or no client certificate", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Audit-Id", "00000000-0000-0000-0000-000000000000")
		_, _ = w.Write(body)
	}))
	srv.EnableHTTP2 = true
	// A client certificate is verified when presented, as a kube-apiserver does.
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serving.TLS()}, ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: ca.Pool()}
	srv.StartTLS()
	b.Cleanup(srv.Close)
	return &benchUpstream{ca: ca, client: client, srv: srv}
}

// clientTLS trusts the upstream's CA and presents the gateway's client certificate.
func (u *benchUpstream) clientTLS() *tls.Config {
	return &tls.Config{RootCAs: u.ca.Pool(), Certificates: []tls.Certificate{u.client.TLS()}}
}

// newH2Transport is configured like a pool entry's transport: HTTP/2 via
// x/net/http2, no transparent compression, client-go's idle limits.
func newH2Transport(b *testing.B, cfg *tls.Config) *http.Transport {
	b.Helper()
	t := &http.Transport{TLSClientConfig: cfg, MaxIdleConnsPerHost: 25, IdleConnTimeout: 90 * time.Second, DisableCompression: true}
	if _, err := http2.ConfigureTransports(t); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(t.CloseIdleConnections)
	return t
}

// runLoad sends GET base+path from parallel goroutines (4 per GOMAXPROCS)
// over one keep-alive client and checks every answer is a 200. warmed, if
// set, runs after the first request (connections dialed, pool entry built).
func runLoad(b *testing.B, c *http.Client, base, path string, warmed func()) {
	b.Helper()
	url := base + path
	get := func() error { return testfrontend.Get(context.Background(), c, url) }
	if err := get(); err != nil {
		b.Fatal(err)
	}
	if warmed != nil {
		warmed()
	}
	b.ReportAllocs()
	testfrontend.GetInParallel(b, get)
}

func BenchmarkDirect(b *testing.B) {
	up := newBenchUpstream(b)
	c := &http.Client{Transport: newH2Transport(b, up.clientTLS())}
	for _, p := range benchPaths {
		b.Run(p.name, func(b *testing.B) { runLoad(b, c, up.srv.URL, p.path, nil) })
	}
}

func BenchmarkBareReverseProxy(b *testing.B) {
	up := newBenchUpstream(b)
	target, _ := url.Parse(up.srv.URL)
	rp := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport: newH2Transport(b, up.clientTLS()), // one transport for all requests
	}
	srv := testfrontend.MustStart(b, rp)
	c := srv.Client()
	b.Cleanup(c.CloseIdleConnections)
	for _, p := range benchPaths {
		b.Run(p.name, func(b *testing.B) { runLoad(b, c, srv.URL, p.path, nil) })
	}
}

func BenchmarkProxyGateway(b *testing.B) {
	up := newBenchUpstream(b)
	px, pl := newBenchProxy(b, up)
	admin := &user.DefaultInfo{Name: "hub-admin", Groups: []string{"system:masters", user.AllAuthenticated}}
	srv := testfrontend.MustStart(b, testfrontend.Handler(px, admin))
	c := srv.Client()
	b.Cleanup(c.CloseIdleConnections)
	for _, p := range benchPaths {
		b.Run(p.name, func(b *testing.B) {
			var before pool.Stats
			runLoad(b, c, srv.ProxyURL(benchCluster), p.path, func() { before = pl.Stats() })
			// Steady state builds no transports (a correctness check, not a timing one).
			after := pl.Stats()
			if after.Created != before.Created || after.Dials != before.Dials {
				b.Errorf("steady state built %d pool entries and dialed %d connections, want 0 and 0",
					after.Created-before.Created, after.Dials-before.Dials)
			}
		})
	}
}

// newBenchProxy is the real Proxy over a real pool and an informer cache. The
// cache reads a fake clientset seeded with the gateway Secret: the hub is not
// what is measured here (requests never read it, only the informer's store).
func newBenchProxy(b *testing.B, up *benchUpstream) (*Proxy, *pool.Pool) {
	b.Helper()
	return newBenchProxyTraced(b, up, nil)
}

// newBenchProxyTraced is newBenchProxy with tr as the proxy's and the
// pool's Tracer (nil: tracing off).
func newBenchProxyTraced(b *testing.B, up *benchUpstream, tr *tracing.Tracer) (*Proxy, *pool.Pool) {
	b.Helper()
	o := pool.DefaultConfig()
	o.Tracer = tr
	pl, err := pool.New(*o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pl.Close)
	px, err := newWired(b, startStore(b, benchNamespace, benchSecret(benchCluster, up)), Config{Pool: pl,
		Authorizer: authorizerfactory.NewAlwaysAllowAuthorizer(), Tracer: tr})
	if err != nil {
		b.Fatal(err)
	}
	return px, pl
}

// BenchmarkProxyGatewayTracing is BenchmarkProxyGateway's GET with tracing
// off and with every request traced to a provider that exports nothing
// (the gateway's own spans; the generic server's server span is not in
// this path): the two side by side, for a ratio, never a timed assertion.
func BenchmarkProxyGatewayTracing(b *testing.B) {
	up := newBenchUpstream(b)
	admin := &user.DefaultInfo{Name: "hub-admin", Groups: []string{"system:masters", user.AllAuthenticated}}
	for _, v := range []struct {
		name string
		tr   *tracing.Tracer
	}{{"off", nil}, {"no-exporter", tracing.New(tracing.NoExporter())}} {
		px, _ := newBenchProxyTraced(b, up, v.tr)
		srv := testfrontend.MustStart(b, testfrontend.Handler(px, admin))
		c := srv.Client()
		b.Cleanup(c.CloseIdleConnections)
		b.Run(v.name, func(b *testing.B) { runLoad(b, c, srv.ProxyURL(benchCluster), benchPaths[0].path, nil) })
	}
}

// benchSecret is a ClusterGateway as stored on the hub: Direct, X509.
func benchSecret(name string, up *benchUpstream) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNamespace, ResourceVersion: "1", UID: "bench-uid",
			Labels: map[string]string{gateways.LabelGateway: "true"}},
		Data: map[string][]byte{
			gateways.KeyEndpointType:   []byte("Direct"),
			gateways.KeyEndpoint:       []byte(up.srv.URL),
			gateways.KeyCABundle:       up.ca.CertPEM,
			gateways.KeyCredentialType: []byte("X509Certificate"),
			gateways.KeyCertificate:    up.client.CertPEM,
			gateways.KeyPrivateKey:     up.client.KeyPEM,
		},
	}
}

// BenchmarkServePieces is the per-request work of serve before the upstream
// round trip, piece by piece.
func BenchmarkServePieces(b *testing.B) {
	up := newBenchUpstream(b)
	px, pl := newBenchProxy(b, up)
	gw, err := px.opts.Clusters.Get(benchCluster)
	if err != nil {
		b.Fatal(err)
	}
	tg, err := px.opts.Clusters.Target(gw)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("store-get", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := px.opts.Clusters.Get(benchCluster); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("record-lease", func(b *testing.B) {
		// The lease through the cluster's record (its target is built once
		// per gateway version), as Serve takes it: through the handle the
		// request took.
		h, err := px.opts.Clusters.Take(context.Background(), benchCluster)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			l, _, err := h.Lease()
			if err != nil {
				b.Fatal(err)
			}
			l.Release()
		}
	})
	b.Run("fingerprint", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = tg.Fingerprint()
		}
	})
	b.Run("scrub-headers", func(b *testing.B) {
		// What a request through the hub carries once the front-proxy
		// headers are gone: nothing to remove, every name to check.
		h := http.Header{
			"Accept": {"application/json"}, "Accept-Encoding": {"gzip"}, "User-Agent": {"kubectl/v1.37.0 (linux/amd64)"},
			"Audit-Id": {"d0e5c7a2-8b1f-4c3e-9a6d-2f4b8e1c7a90"}, "X-Forwarded-For": {"127.0.0.1"}, "Content-Type": {"application/json"},
		}
		b.ReportAllocs()
		for b.Loop() {
			scrubClientHeaders(h)
		}
		if len(h) != 6 {
			b.Fatalf("scrubbed %v", h)
		}
	})
	b.Run("inner-parse", func(b *testing.B) {
		// What the handler chain's IsLongRunning and Serve each do per
		// proxied request: the inner request parsed and its kind read.
		req := httptest.NewRequest(http.MethodGet, "https://hub/x?limit=500", nil)
		b.ReportAllocs()
		for b.Loop() {
			in, err := innerInfo(req, "/api/v1/namespaces/default/pods")
			if err != nil || kindOf(req, in) != kindRequest {
				b.Fatal(in, err)
			}
		}
	})
	b.Run("acquire-release", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l, err := pl.Acquire(tg)
			if err != nil {
				b.Fatal(err)
			}
			l.Release()
		}
	})
}
