// Package testfrontend stands in for the generic API server in front of the
// gateway's proxy, for the benchmarks (pkg/proxy, hack/bench) and the churn
// test (test/e2e), which build the request path in their own process.
//
// Handler does per request what the generic server does before the proxy
// subresource's handler: it parses the RequestInfo, sets the authenticated
// user, and hands the gateway's name and the rest of the path to the proxy,
// as ProxyREST.Connect does. It runs no authentication, authorization,
// timeout or in-flight limit: the real chain is tested through the hub.
// Server serves a handler over TLS with HTTP/2 (and HTTP/1.1 for upgrades),
// as the generic server does.
package testfrontend

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// Prefix is where ClusterGateways are served; a gateway's proxy is at
// Prefix + name + "/proxy".
const Prefix = "/apis/" + v1alpha1.GroupName + "/v1alpha1/clustergateways/"

// Connecter is what serves a gateway's proxy subresource (pkg/proxy's
// Proxy; an interface, so that pkg/proxy's own tests may use this package).
type Connecter interface {
	Serve(w http.ResponseWriter, r *http.Request, name, subpath string)
}

var requestInfo = &apirequest.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

// Handler serves Prefix{name}/proxy/{path} through px, as the user u.
// Anything else is a 404.
func Handler(px Connecter, u user.Info) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ri, err := requestInfo.NewRequestInfo(r)
		sub, ok := "", err == nil && ri.IsResourceRequest && ri.APIGroup == v1alpha1.GroupName && ri.Resource == "clustergateways" &&
			ri.Subresource == "proxy" && ri.Name != ""
		if ok {
			sub, ok = subpath(r.URL.Path, ri.Name)
		}
		if !ok {
			http.Error(w, "only "+Prefix+"{name}/proxy/... is served here", http.StatusNotFound)
			return
		}
		ctx := apirequest.WithRequestInfo(apirequest.WithUser(r.Context(), u), ri)
		px.Serve(w, r.WithContext(ctx), ri.Name, sub) // as the gateway's route does: no handler built per request
	})
}

// subpath is what follows Prefix+name+"/proxy" in path, cut out of it as
// the gateway's route does (pkg/proxy's connectSubpath) rather than found
// by building that prefix per request: what the stand-in allocates counts
// in the benchmarks as the gateway's.
func subpath(path, name string) (string, bool) {
	rest, ok := strings.CutPrefix(path, Prefix)
	if ok {
		rest, ok = strings.CutPrefix(rest, name)
	}
	if ok {
		rest, ok = strings.CutPrefix(rest, "/proxy")
	}
	return rest, ok
}

// Server serves a handler over TLS on 127.0.0.1 with a certificate of its
// own CA.
type Server struct {
	URL   string // https://127.0.0.1:port
	CAPEM []byte // the CA that issued the serving certificate
	srv   *httptest.Server
	ca    *testpki.CA
}

// Start serves h until Close.
func Start(h http.Handler) (*Server, error) { return StartNamed(h) }

// StartNamed is Start with a serving certificate valid for dnsNames as well
// as localhost and 127.0.0.1 (a hub's aggregator checks its Service's name).
func StartNamed(h http.Handler, dnsNames ...string) (*Server, error) {
	ca, err := testpki.NewCA("testfrontend-ca")
	if err != nil {
		return nil, err
	}
	serving, err := ca.Issue(testpki.Spec{CommonName: "testfrontend", IPs: []string{"127.0.0.1"}, DNSNames: append([]string{"localhost"}, dnsNames...), Server: true})
	if err != nil {
		return nil, err
	}
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{serving.TLS()}}
	srv.Config.ReadHeaderTimeout = 10 * time.Second
	srv.StartTLS()
	return &Server{URL: srv.URL, CAPEM: ca.CertPEM, srv: srv, ca: ca}, nil
}

// T is what MustStart needs of a test or benchmark.
type T interface {
	Helper()
	Fatal(args ...any)
	Cleanup(func())
}

// MustStart is Start that fails the test, and closes the server when it ends.
func MustStart(t T, h http.Handler) *Server {
	t.Helper()
	s, err := Start(h)
	if err != nil {
		t.Fatal(fmt.Errorf("testfrontend: %w", err))
	}
	t.Cleanup(s.Close)
	return s
}

// ProxyURL is the URL of gateway name's proxy subresource.
func (s *Server) ProxyURL(name string) string { return s.URL + Prefix + name + "/proxy" }

// TLSConfig trusts the server's CA.
func (s *Server) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: s.ca.Pool()}
}

// Client is a new keep-alive client of the server that negotiates HTTP/2,
// as client-go does. Close its idle connections when done with it.
func (s *Server) Client() *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: s.TLSConfig(), ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 64}}
}

// Get sends GET url with c, as a client-go read would (JSON), reads the
// whole answer and returns an error unless it is a 200: the load that the
// benchmarks send through a front end.
func Get(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return err
}

// Close stops the server and closes its connections.
func (s *Server) Close() { s.srv.Close() }

// GetInParallel is a benchmark's timed loop: b.N calls of get on 4
// goroutines per CPU (8 on this project's 2), each goroutine stopping at its
// first error.
func GetInParallel(b *testing.B, get func() error) {
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := get(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
