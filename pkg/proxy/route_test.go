package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	endpointsmetrics "k8s.io/apiserver/pkg/endpoints/metrics"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/clustergateway/cluster-gateway/internal/testmetrics"
	"github.com/clustergateway/cluster-gateway/pkg/registry/clustergateway"
)

// The route serves what the REST handler would have served as the proxy
// subresource, with the connect handler's subpath (trailing slash kept) and
// the client's query as sent (dryRun included), counted in the generic
// server's request metrics; anything else, and everything before the proxy
// is set, goes on to the REST handler.
func TestRouteServesTheProxySubresource(t *testing.T) {
	up := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
	}))
	px := newFixtureProxy(t, tokenSecret("c1", up.URL, upstreamCA(up), "t", "None"))
	var route Route
	fallback := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusTeapot)
		_, _ = io.WriteString(w, "REST handler")
	})
	// The generic server's RequestInfo and user, then the route.
	front := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ri, err := hubRequestInfo.NewRequestInfo(r)
			if err != nil {
				t.Fatal(err)
			}
			ctx := apirequest.WithRequestInfo(apirequest.WithUser(r.Context(), &user.DefaultInfo{Name: "admin", Groups: []string{"system:masters"}}), ri)
			h.ServeHTTP(w, r.WithContext(ctx))
		})
	}
	h := front(route.Handler(fallback))
	do := func(method, target string) (int, string) {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := do("GET", proxyPrefix+"/api"); code != http.StatusTeapot {
		t.Fatalf("before Serve: %d %s, want the REST handler", code, body)
	}
	route.Serve(px, clustergateway.NewProxyREST(px).ConnectMethods())

	endpointsmetrics.Register()
	count := func() float64 {
		m, err := testmetrics.Gather(legacyregistry.DefaultGatherer)
		if err != nil {
			t.Fatal(err)
		}
		n := 0.0
		for k, v := range m {
			if strings.HasPrefix(k, "apiserver_request_total{") && strings.Contains(k, `subresource="proxy"`) && strings.Contains(k, `resource="clustergateways"`) {
				n += v
			}
		}
		return n
	}
	before := count()
	served := []struct{ method, target, want string }{
		{"GET", proxyPrefix + "/api/v1/namespaces", "GET /api/v1/namespaces?"},
		{"GET", proxyPrefix + "/api/", "GET /api/?"},
		{"GET", proxyPrefix, "GET /?"},
		{"GET", proxyPrefix + "/", "GET /?"},
		{"DELETE", proxyPrefix + "/api/v1/namespaces/x?dryRun=All", "DELETE /api/v1/namespaces/x?dryRun=All"},
		{"PATCH", proxyPrefix + "/apis/apps/v1/namespaces/d/deployments/a?fieldManager=m&force=true", "PATCH /apis/apps/v1/namespaces/d/deployments/a?fieldManager=m&force=true"},
	}
	for _, c := range served {
		if code, body := do(c.method, c.target); code != http.StatusOK || body != c.want {
			t.Errorf("%s %s: %d %q, want 200 %q from the cluster", c.method, c.target, code, body, c.want)
		}
	}
	if got := count() - before; got != float64(len(served)) {
		t.Errorf("apiserver_request_total of clustergateways/proxy grew by %v, want %d", got, len(served))
	}
	for _, c := range []struct{ method, target string }{
		{"TRACE", proxyPrefix + "/api"}, // not a method the subresource serves
		{"GET", "/apis/gateway.clustergateway.io/v1beta1/clustergateways/c1/proxy/api"},               // another version
		{"GET", "/apis/gateway.clustergateway.io/v1alpha1/namespaces/d/clustergateways/c1/proxy/api"}, // namespaced
		{"GET", "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/c1/health"},                 // another subresource
		{"GET", "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/c1"},                        // the object
		{"GET", "/api/v1/namespaces"}, // not the gateway's
	} {
		if code, body := do(c.method, c.target); code != http.StatusTeapot {
			t.Errorf("%s %s: %d %s, want it left to the REST handler", c.method, c.target, code, body)
		}
	}
}

// The route serves exactly the methods it is given (ProxyREST.ConnectMethods
// here), and leaves every other method to the REST handler. That the server
// gives it the methods the REST installs is pkg/apiserver's
// TestRouteMethodsAreTheREST, on the assembled server.
func TestRouteServesOnlyTheMethodsItIsGiven(t *testing.T) {
	up := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	px := newFixtureProxy(t, tokenSecret("c1", up.URL, upstreamCA(up), "t", "None"))
	rest := clustergateway.NewProxyREST(px).ConnectMethods()
	var route Route
	route.Serve(px, rest)
	h := route.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	installed := map[string]bool{}
	for _, m := range rest {
		installed[m] = true
	}
	all := []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete,
		http.MethodConnect, http.MethodOptions, http.MethodTrace, "PROPFIND"}
	for _, m := range all {
		req := httptest.NewRequest(m, proxyPrefix+"/api", nil)
		ri, err := hubRequestInfo.NewRequestInfo(req)
		if err != nil {
			t.Fatal(err)
		}
		ctx := apirequest.WithRequestInfo(apirequest.WithUser(req.Context(), &user.DefaultInfo{Name: "admin", Groups: []string{"system:masters"}}), ri)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req.WithContext(ctx))
		if routed := rec.Code != http.StatusTeapot; routed != installed[m] {
			t.Errorf("%s: routed %v (%d), but the REST installs the subresource for it: %v (ConnectMethods %v)", m, routed, rec.Code, installed[m], rest)
		}
	}
	if len(installed) == 0 {
		t.Fatal("the REST installs the proxy subresource for no method: the test proves nothing")
	}
}

// connectSubpath cuts the subpath out of the request's path; it must be
// exactly what joining the parts gives (the connect handler's rule), for any
// path the server routes here, and cost no allocation.
func FuzzConnectSubpath(f *testing.F) {
	for _, p := range []string{"", "/", "/api", "/api/", "/api/v1/pods", "//api", "//api//v1//", "/a///b", "///", "/%2F/x", "/a/./b/../c", "/api/v1/namespaces/default/pods/p1/log/"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, sub string) {
		const prefix = "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/c1/proxy"
		req := httptest.NewRequest(http.MethodGet, "https://hub.example/", nil)
		req.URL.Path = prefix + sub
		ri, err := hubRequestInfo.NewRequestInfo(req)
		if err != nil || !isProxy(ri) {
			return
		}
		if got, want := connectSubpath(ri), joinedSubpath(ri); got != want {
			t.Fatalf("connectSubpath(%q) = %q, joining the parts gives %q", req.URL.Path, got, want)
		}
		if n := testing.AllocsPerRun(10, func() { _ = connectSubpath(ri) }); n != 0 {
			t.Fatalf("connectSubpath(%q) allocates %v times", req.URL.Path, n)
		}
	})
}
