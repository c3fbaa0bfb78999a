package proxy

// Edges of the request path an attacker would try, each asserted at the
// cluster (what it received) or in the raw log: upgrades on any path,
// Host and odd header spellings, request smuggling on the HTTP/1.1 upgrade
// path, percent-encoded paths judged as served, -v=10 logs, and trailers.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"k8s.io/apiserver/pkg/authorization/authorizer"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/clustergateway/cluster-gateway/pkg/registry/clustergateway"
)

// An Upgrade header turns any request, not only exec, into one that needs
// create on clustergateways/proxy, whatever the spelling of Connection; the
// cluster hears nothing of a refused one.
func TestUpgradeOnAnyPathNeedsCreate(t *testing.T) {
	up := newCapture(t)
	authz := &denyCreate{}
	px := newFixtureProxyWith(t, func(o *Config) { o.Authorizer = authz.authorizer() },
		tokenSecret("c", up.srv.URL, upstreamCA(up.srv), "t", "None"))
	srv := proxyServer(t, px, alice, false)
	for _, path := range []string{"/c/proxy/api/v1/namespaces/default/secrets", "/c/proxy/api/v1/secrets?watch=true", "/c/proxy/version"} {
		for _, conn := range [][]string{{"Upgrade"}, {"keep-alive, upgrade"}, {"keep-alive", "UPGRADE"}} {
			status := rawUpgrade(t, srv, path, http.Header{"Connection": conn, "Upgrade": {"websocket"}})
			if !strings.HasPrefix(status, "HTTP/1.1 403") {
				t.Errorf("%s with Connection %q and without create: %q, want 403", path, conn, status)
			}
		}
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("the cluster received %d requests", n)
	}
}

// The cluster sees its own host, not the client's Host, for ordinary
// requests and upgrades; client credentials in odd spellings do not pass.
func TestHostAndOddSpellingsAtTheCluster(t *testing.T) {
	up := newCapture(t)
	px := newFixtureProxy(t, tokenSecret("c", up.srv.URL, upstreamCA(up.srv), "gw-token", "Caller"))
	upHost := strings.TrimPrefix(up.srv.URL, "https://")
	hostile := http.Header{
		"Impersonate-Extra-%41":  {"x"},
		"Impersonate-Uid":        {"0"},
		"X-Remote-Extra-Scopes":  {"all"},
		"Cookie":                 {"s=1"},
		"Proxy-Authorization":    {"Basic eDp5"},
		"Sec-Websocket-Protocol": {"base64url.bearer.authorization.k8s.io.Y2xpZW50"},
	}
	srv := proxyServer(t, px, alice, false)
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/c/proxy/api", nil)
	req.Host = "evil.example"
	for k, v := range hostile {
		req.Header[k] = v
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	got := up.last(t)
	if got.Host != upHost {
		t.Errorf("Host at the cluster %q, want %q", got.Host, upHost)
	}
	wantIdentity(t, got.Header, "gw-token", alice)
	if v := got.Header.Values("Sec-Websocket-Protocol"); len(v) != 0 {
		t.Errorf("bearer subprotocol reached the cluster: %q", v)
	}

	h := hostile.Clone()
	h.Set("Connection", "Upgrade")
	h.Set("Upgrade", "websocket")
	if status := rawUpgrade(t, srv, "/c/proxy/api/v1/namespaces/default/pods/p/exec", h); !strings.HasPrefix(status, "HTTP/1.1 101") {
		t.Fatalf("upgrade: %q", status)
	}
	got = up.last(t)
	if got.Host != upHost {
		t.Errorf("upgrade: Host at the cluster %q, want %q", got.Host, upHost)
	}
	wantIdentity(t, got.Header, "gw-token", alice)
}

// A request the client frames oddly (chunked upgrade with a request
// smuggled behind it, pipelined requests) reaches the cluster as exactly
// one request: the one that was authorized.
func TestUpgradeSmugglingOneRequest(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	refusing := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" auth="+r.Header.Get("Authorization"))
		mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusForbidden) // not upgraded: keep-alive, ready for another request
	}))
	px := newFixtureProxy(t, tokenSecret("c", refusing.URL, upstreamCA(refusing), "gw-token", "None"))
	srv := proxyServer(t, px, alice, false)
	smuggled := "GET /api/v1/secrets HTTP/1.1\r\nHost: x\r\n\r\n"
	for _, raw := range []string{
		"GET /c/proxy/api/v1/namespaces/default/pods/p/exec HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled,
		"POST /c/proxy/api/v1/namespaces/default/pods/p/exec HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nContent-Length: " + fmt.Sprint(len(smuggled)) + "\r\n\r\n" + smuggled,
	} {
		mu.Lock()
		seen = nil
		mu.Unlock()
		conn := rawHTTP1(t, srv.URL)
		if _, err := conn.Write([]byte(raw)); err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(bufio.NewReader(conn)) // until the gateway closes
		conn.Close()
		mu.Lock()
		got := append([]string(nil), seen...)
		mu.Unlock()
		if len(got) != 1 || !strings.HasSuffix(strings.Fields(got[0])[1], "/exec") {
			t.Errorf("the cluster received %q, want only the exec request", got)
		}
	}
}

// recordingAuthz allows everything and records what it was asked.
type recordingAuthz struct {
	mu    sync.Mutex
	attrs []authorizer.Attributes
}

func (a *recordingAuthz) Authorize(_ context.Context, at authorizer.Attributes) (authorizer.Decision, string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.attrs = append(a.attrs, at)
	return authorizer.DecisionAllow, "", nil
}

// With --authorize-proxy-subpath, what the hub authorized is what the
// cluster serves, for percent-encoded slashes, '?', '#', ';', '\' and '%',
// through a gateway whose address has a path: the cluster, parsing the
// path it received (less the address's prefix) as a kube-apiserver does,
// finds the same verb, namespace, resource, subresource, name or path; and
// nothing escapes the prefix.
func TestSubpathAuthorizedAsServed(t *testing.T) {
	up := newCapture(t)
	authz := &recordingAuthz{}
	px := newFixtureProxyWith(t, func(o *Config) { o.Authorizer, o.AuthorizeSubpath = authorizer.AuthorizerFunc(authz.Authorize), true },
		tokenSecret("c1", up.srv.URL+"/prefix", upstreamCA(up.srv), "t", "None"))
	var route Route
	route.Serve(px, clustergateway.NewProxyREST(px).ConnectMethods())
	routed := route.Handler(http.NotFoundHandler())
	front := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ri, err := hubRequestInfo.NewRequestInfo(r)
		if err != nil {
			t.Error(err)
			return
		}
		ctx := apirequest.WithRequestInfo(apirequest.WithUser(r.Context(), alice), ri)
		routed.ServeHTTP(w, r.WithContext(ctx))
	}))
	front.StartTLS()
	defer front.Close()
	for _, sub := range []string{
		"/api/v1/namespaces/default%2Fsecrets",
		"/api/v1/namespaces/kube-system/secrets%3Fx",
		"/api/v1/namespaces/a/configmaps/b%23c",
		"/api/v1/namespaces/a/configmaps/b;c",
		"/api/v1/namespaces/a/configmaps/b%3Bc",
		"/api/v1/namespaces/a/configmaps/b%5Cc",
		"/api/v1/namespaces/a/configmaps/..%5C..%5Csecrets",
		"/api/v1/namespaces/a/configmaps/%252e%252e",
		"/api/v1/namespaces/a/configmaps/..%2F..%2Fsecrets",
		"/api/v1/namespaces/a/configmaps/%2e%2e",
		"/version%2F..%2F..%2Fapi",
		"/healthz%3Fverbose",
		"/%2Fapi/v1/secrets",
		"/api/v1/namespaces/a/pods/p/proxy/%2e%2e/%2e%2e/x",
		"/apis/",
		"/api/v1/namespaces/" + strings.Repeat("a%2F", 20000) + "x", // long: 60 KB
	} {
		authz.mu.Lock()
		authz.attrs = nil
		authz.mu.Unlock()
		before := len(up.requests())
		conn := rawHTTP1(t, front.URL)
		fmt.Fprintf(conn, "GET %s%s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", proxyPrefix, sub)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: %v", sub, err)
		}
		resp.Body.Close()
		conn.Close()
		got := up.requests()[before:]
		if len(got) == 0 {
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("%s: %d and nothing reached the cluster", sub, resp.StatusCode)
			}
			continue
		}
		seen := got[0].URL.Path
		if !strings.HasPrefix(seen, "/prefix/") {
			t.Errorf("%s: the cluster was asked for %q, outside the address's /prefix", sub, seen)
			continue
		}
		authz.mu.Lock()
		var inner authorizer.Attributes
		for _, a := range authz.attrs {
			if a.GetResource() != "clustergateways" {
				inner = a
			}
		}
		authz.mu.Unlock()
		if inner == nil {
			t.Errorf("%s: the inner request was not authorized", sub)
			continue
		}
		served, err := innerRequestInfo.NewRequestInfo(&http.Request{Method: http.MethodGet, URL: &url.URL{Path: strings.TrimPrefix(seen, "/prefix")}})
		if err != nil {
			t.Fatal(err)
		}
		judged := fmt.Sprintf("%v %s ns=%q %s/%s name=%q path=%q", inner.IsResourceRequest(), inner.GetVerb(), inner.GetNamespace(), inner.GetResource(), inner.GetSubresource(), inner.GetName(), inner.GetPath())
		at := fmt.Sprintf("%v %s ns=%q %s/%s name=%q path=%q", served.IsResourceRequest, served.Verb, served.Namespace, served.Resource, served.Subresource, served.Name, served.Path)
		if judged != at {
			t.Errorf("%s:\n authorized %s\n    served %s", sub, judged, at)
		}
	}
}

// At -v=10 (client-go and the upgrade proxy log headers from -v=6), no log
// line of the request path carries the gateway's token, the client's token
// (as Authorization or WebSocket subprotocol) or the identity headers the
// gateway adds, before any redaction.
func TestNoCredentialsInVerboseLogsOfRequestPath(t *testing.T) {
	var mu sync.Mutex
	var buf bytes.Buffer
	var fs flag.FlagSet
	klog.InitFlags(&fs)
	// The logger is global: set before this test starts any goroutine, and
	// restored by the first cleanup registered, which runs last, once this
	// test's stores and servers are stopped (none of the package's tests
	// runs in parallel).
	_ = fs.Set("v", "10")
	klog.SetLogger(textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(10), textlogger.Output(lockedWriter{&mu, &buf}))))
	t.Cleanup(func() {
		klog.ClearLogger()
		_ = fs.Set("v", "0")
	})

	const gwToken, clientToken = "gw-token-0123456789abcdef", "client-token-fedcba9876543210"
	ws := base64.RawURLEncoding.EncodeToString([]byte(clientToken))
	up := newCapture(t)
	px := newFixtureProxy(t, tokenSecret("c", up.srv.URL, upstreamCA(up.srv), gwToken, "Caller"))
	for _, h2 := range []bool{false, true} {
		srv := proxyServer(t, px, alice, h2)
		for _, sub := range []string{"/api/v1/pods", "/api/v1/pods?watch=true&timeoutSeconds=1"} {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/c/proxy"+sub, nil)
			req.Header.Set("Authorization", "Bearer "+clientToken)
			req.Header.Set("Sec-WebSocket-Protocol", "base64url.bearer.authorization.k8s.io."+ws)
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	srv := proxyServer(t, px, alice, false)
	rawUpgrade(t, srv, "/c/proxy/api/v1/namespaces/default/pods/p/exec", http.Header{
		"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Authorization": {"Bearer " + clientToken},
		"Sec-Websocket-Protocol": {"v5.channel.k8s.io, base64url.bearer.authorization.k8s.io." + ws},
	})
	// A failing upstream: the error path logs too.
	bad := newFixtureProxy(t, tokenSecret("d", closedAddress(t), upstreamCA(up.srv), gwToken, "Caller"))
	serveAs(bad, "d", "/api", alice, httptest.NewRequest(http.MethodGet, "/x", nil))

	mu.Lock()
	logs := buf.String()
	mu.Unlock()
	if !strings.Contains(logs, "Connecting to backend proxy") {
		t.Fatalf("no upgrade proxy log at -v=10: the test proves nothing\n%s", logs)
	}
	for _, needle := range []string{gwToken, clientToken, ws, "Impersonate-User", "Impersonate-Group", "Impersonate-Uid"} {
		if strings.Contains(logs, needle) {
			t.Errorf("the log holds %q:\n%s", needle, logs)
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Request trailers (a chunked body's) carry no client credential or
// identity to the cluster either.
func TestTrailersCarryNoIdentity(t *testing.T) {
	var mu sync.Mutex
	var got *http.Request
	up := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // trailers arrive after the body
		mu.Lock()
		got = r.Clone(context.Background())
		mu.Unlock()
	}))
	px := newFixtureProxy(t, tokenSecret("c", up.URL, upstreamCA(up), "gw-token", "None"))
	srv := proxyServer(t, px, alice, false)
	conn := rawHTTP1(t, srv.URL)
	fmt.Fprint(conn, "POST /c/proxy/api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"+
		"Transfer-Encoding: chunked\r\nTrailer: Authorization, Impersonate-User\r\n\r\n2\r\n{}\r\n0\r\nAuthorization: Bearer trailer-token\r\nImpersonate-User: system:admin\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if got == nil {
		t.Fatalf("%d: the cluster received nothing", resp.StatusCode)
	}
	wantIdentity(t, got.Header, "gw-token", nil)
	for k, v := range got.Trailer {
		for _, s := range v {
			if s != "" {
				t.Errorf("trailer %s: %q reached the cluster", k, s)
			}
		}
	}
}
