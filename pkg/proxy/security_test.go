package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/clustergateway/cluster-gateway/pkg/endpointpolicy"
)

// capture is an upstream "cluster" that records every request it receives,
// upgrade requests included (it answers those 101 and closes).
type capture struct {
	mu   sync.Mutex
	reqs []*http.Request
	srv  *httptest.Server
	// answer, if set, writes the response of an ordinary request.
	answer func(w http.ResponseWriter, r *http.Request)
}

func newCapture(t testing.TB) *capture {
	return newCaptureAsking(t, tls.NoClientCert)
}

// newCaptureAsking is newCapture with a policy for client certificates
// (newTLSUpstreamAsking): each recorded request keeps its TLS state.
func newCaptureAsking(t testing.TB, clientAuth tls.ClientAuthType) *capture {
	c := &capture{}
	c.srv = newTLSUpstreamAsking(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.reqs = append(c.reqs, r.Clone(context.Background()))
		answer := c.answer
		c.mu.Unlock()
		if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") || strings.EqualFold(r.Header.Get("Upgrade"), "SPDY/3.1") {
			conn, buf, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_, _ = buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
				_ = buf.Flush()
				conn.Close()
			}
			return
		}
		if answer != nil {
			answer(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Success"}`))
	}), clientAuth)
	return c
}

func (c *capture) requests() []*http.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*http.Request(nil), c.reqs...)
}

func (c *capture) last(t *testing.T) *http.Request {
	t.Helper()
	r := c.requests()
	if len(r) == 0 {
		t.Fatal("the cluster received no request")
	}
	return r[len(r)-1]
}

// proxyServer serves px on a real HTTP server, the way the generic API
// server would: as the given hub user, at /{gateway}/proxy/{path}. The
// client's headers arrive as they were sent on the wire.
func proxyServer(t *testing.T, px *Proxy, u user.Info, http2 bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, sub, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/proxy")
		px.Handler(name, sub).ServeHTTP(w, r.WithContext(apirequest.WithUser(r.Context(), u)))
	}))
	srv.EnableHTTP2 = http2
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// wantIdentity checks that h carries exactly the gateway's identity: its
// bearer token (none when token is empty: an X.509 gateway's identity is
// its client certificate) and, with a caller, that caller's impersonation.
func wantIdentity(t *testing.T, h http.Header, token string, caller user.Info) {
	t.Helper()
	if token == "" {
		for k, v := range h {
			if strings.EqualFold(k, "Authorization") {
				t.Errorf("%s at the cluster of a gateway without a token = %q, want none", k, v)
			}
		}
	} else if got := h.Values("Authorization"); len(got) != 1 || got[0] != "Bearer "+token {
		t.Errorf("Authorization at the cluster = %q, want only the gateway's token", got)
	}
	if caller == nil {
		for k := range h {
			if identityHeader(k) && !strings.EqualFold(k, "Authorization") {
				t.Errorf("%s reached the cluster of a gateway that does not impersonate: %q", k, h[k])
			}
		}
		return
	}
	want := http.Header{}
	setImpersonation(want, caller)
	got := http.Header{}
	for k, v := range h {
		if identityHeader(k) && !strings.EqualFold(k, "Authorization") {
			got[k] = v
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("identity headers at the cluster\n got %v\nwant %v", got, want)
	}
}

var alice = &user.DefaultInfo{Name: "alice", UID: "a-1", Groups: []string{"developers", user.AllAuthenticated}}

// A client that names the gateway's identity headers in Connection cannot
// make the reverse proxy drop them: the identity is applied after hop-by-hop
// removal, for ordinary requests over HTTP/1.1 and HTTP/2 and for upgrades,
// through a gateway of every kind.
func TestIdentityOutlivesHopByHopHeaders(t *testing.T) {
	f := newKindsFixture(t)
	hostile := "Impersonate-User, Impersonate-Group, Impersonate-Uid, Authorization, X-Remote-User"
	for _, k := range f.kinds {
		for _, h2 := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/http2=%v", k.gateway, h2), func(t *testing.T) {
				srv := proxyServer(t, f.px, alice, h2)
				req, _ := http.NewRequest(http.MethodGet, srv.URL+"/"+k.gateway+"/proxy/api/v1/namespaces", nil)
				if !h2 {
					// HTTP/2 has no Connection header (Go's client refuses it,
					// servers must reject it); HTTP/1.1 is where it matters.
					req.Header.Set("Connection", hostile)
				}
				req.Header.Set("Impersonate-User", "system:admin")
				req.Header.Set("Authorization", "Bearer client-token")
				req.Header.Set("Cookie", "session=client")
				req.Header.Set("X-Remote-User", "mallory")
				n := len(f.up.requests())
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				got := f.up.requests()[n:]
				if resp.StatusCode != http.StatusOK || (h2 && resp.ProtoMajor != 2) || len(got) != 1 {
					t.Fatalf("status %d over %s; the cluster received %d requests, want 1", resp.StatusCode, resp.Proto, len(got))
				}
				k.want(t, got[0], alice)
			})
		}
		t.Run(k.gateway+"/upgrade", func(t *testing.T) {
			srv := proxyServer(t, f.px, alice, false)
			n := len(f.up.requests())
			status := rawUpgrade(t, srv, "/"+k.gateway+"/proxy/api/v1/namespaces/default/pods/p/exec?command=ls", http.Header{
				"Connection":       {"Upgrade, " + hostile},
				"Upgrade":          {"websocket"},
				"Impersonate-User": {"system:admin"},
				"Authorization":    {"Bearer client-token"},
				"Cookie":           {"session=client"},
				"X-Remote-User":    {"mallory"},
				// The bearer prefix anywhere in a subprotocol, in any case, goes too.
				"Sec-Websocket-Protocol": {"v5.channel.k8s.io, base64url.bearer.authorization.k8s.io.Y2xpZW50LXRva2Vu, x.Base64Url.Bearer.Authorization.K8s.Io.dG9rZW4"},
			})
			got := f.up.requests()[n:]
			if !strings.HasPrefix(status, "HTTP/1.1 101") || len(got) != 1 {
				t.Fatalf("upgrade answered %q; the cluster received %d requests, want 1", status, len(got))
			}
			h := got[0].Header
			k.want(t, got[0], alice)
			if c := h.Values("Connection"); len(c) != 1 || !strings.EqualFold(c[0], "Upgrade") {
				t.Errorf("Connection at the cluster = %q, want only Upgrade", c)
			}
			if p := h.Values("Sec-Websocket-Protocol"); len(p) != 1 || p[0] != "v5.channel.k8s.io" {
				t.Errorf("WebSocket subprotocols at the cluster = %q, want the client's bearer subprotocol removed and v5.channel.k8s.io kept", p)
			}
		})
	}
}

// rawHTTP1 is a TLS connection to the test server at serverURL that speaks
// HTTP/1.1, for requests written byte by byte; closed when the test ends.
func rawHTTP1(t *testing.T, serverURL string) *tls.Conn {
	t.Helper()
	u, _ := url.Parse(serverURL)
	conn, err := tls.Dial("tcp", u.Host, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}) //nolint:gosec // the test's own server
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	return conn
}

// rawUpgrade sends an upgrade request with exactly these headers over
// HTTP/1.1 and returns the status line.
func rawUpgrade(t *testing.T, srv *httptest.Server, path string, h http.Header) string {
	t.Helper()
	conn := rawHTTP1(t, srv.URL)
	defer conn.Close()
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\n", path, strings.TrimPrefix(srv.URL, "https://"))
	for k, vs := range h {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	if _, err := conn.Write([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the upgrade answer: %v", err)
	}
	return line
}

// Relative segments and empty segments are refused before anything is sent:
// the path that is authorized is the path the cluster serves.
func TestRelativePathsRefused(t *testing.T) {
	up := newCapture(t)
	px := newFixtureProxy(t, tokenSecret("c", up.srv.URL, upstreamCA(up.srv), "t", "None"))
	for _, sub := range []string{"/api/v1/namespaces/x/../../secrets", "/api/./v1", "/api//v1", "/..", "/api/v1/%2e%2e"} {
		t.Run(sub, func(t *testing.T) {
			p, _ := url.PathUnescape(sub) // the generic server hands the decoded path over
			rec := serveAs(px, "c", p, alice, httptest.NewRequest(http.MethodGet, "/x", nil))
			if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "segment") {
				t.Fatalf("%s: %d %s, want 400 naming the segment", sub, rec.Code, rec.Body)
			}
		})
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("the cluster received %d requests for refused paths", n)
	}
	for _, ok := range []string{"", "/", "/api/v1/namespaces/", "/api/v1/namespaces/a..b"} {
		if rec := serveAs(px, "c", ok, alice, httptest.NewRequest(http.MethodGet, "/x", nil)); rec.Code != http.StatusOK {
			t.Errorf("%q: %d %s, want 200", ok, rec.Code, rec.Body)
		}
	}
}

// A redirect from a cluster is not passed on, for ordinary requests and upgrades.
func TestRedirectsRefused(t *testing.T) {
	up := newCapture(t)
	up.answer = func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://login.example/authorize?code=secret", http.StatusFound)
	}
	px := newFixtureProxy(t, tokenSecret("c", up.srv.URL, upstreamCA(up.srv), "t", "None"))
	rec := serveAs(px, "c", "/api", alice, httptest.NewRequest(http.MethodGet, "/x", nil))
	body := rec.Body.String()
	if rec.Code != http.StatusBadGateway || rec.Header().Get("Location") != "" || !strings.Contains(body, "redirect (302 to https://login.example/authorize)") ||
		strings.Contains(body, "code=secret") || !strings.Contains(body, `"kind":"Status"`) {
		t.Fatalf("redirect: %d, Location %q, body %s; want a 502 Status naming the redirect without its query", rec.Code, rec.Header().Get("Location"), body)
	}
	if len(up.requests()) != 1 {
		t.Fatalf("the cluster saw %d requests, want 1", len(up.requests()))
	}

	// However Location is repeated or spelled, over HTTP/1.1 and HTTP/2:
	// curl -L follows the second of an empty and a real Location.
	for _, locations := range [][]string{{"", "https://login.example/steal"}, {" ", "https://login.example/steal"}, {""}} {
		odd := newCapture(t)
		odd.answer = func(w http.ResponseWriter, _ *http.Request) {
			w.Header()["Location"] = locations
			w.WriteHeader(http.StatusFound)
		}
		pxOdd := newFixtureProxy(t, tokenSecret("c", odd.srv.URL, upstreamCA(odd.srv), "t", "None"))
		for _, h2 := range []bool{false, true} {
			srv := proxyServer(t, pxOdd, alice, h2)
			client := srv.Client()
			client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
			resp, err := client.Get(srv.URL + "/c/proxy/api")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadGateway || len(resp.Header.Values("Location")) != 0 || !strings.Contains(string(b), "redirect (302 to ") {
				t.Errorf("Location %q, HTTP/2 %v: %d, Location %q, body %s; want a 502 Status and no Location", locations, h2, resp.StatusCode, resp.Header.Values("Location"), b)
			}
		}
	}

	// An upgrade answered with a redirect: the raw upgrade path of
	// UpgradeAwareHandler, which the reverse proxy's hook does not cover.
	redirecting := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://elsewhere.example/", http.StatusTemporaryRedirect)
	}))
	px2 := newFixtureProxy(t, tokenSecret("r", redirecting.URL, upstreamCA(redirecting), "t", "None"))
	srv := proxyServer(t, px2, alice, false)
	status := rawUpgrade(t, srv, "/r/proxy/api/v1/namespaces/default/pods/p/exec", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}})
	if !strings.HasPrefix(status, "HTTP/1.1 502") {
		t.Fatalf("an upgrade answered with a redirect gave %q, want 502", status)
	}
}

// denyCreate allows everything but create, and records what it was asked.
type denyCreate struct {
	mu    sync.Mutex
	calls []authorizer.Attributes
}

func (d *denyCreate) authorizer() authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.calls = append(d.calls, a)
		if a.GetVerb() == "create" {
			return authorizer.DecisionNoOpinion, "no create for you", nil
		}
		return authorizer.DecisionAllow, "", nil
	})
}

// Exec over WebSocket is a GET; it still needs create on
// clustergateways/proxy, and with --authorize-proxy-subpath create on the
// inner pods/exec, or the cluster never hears of it.
func TestUpgradesNeedCreate(t *testing.T) {
	up := newCapture(t)
	for _, subpath := range []bool{false, true} {
		t.Run(fmt.Sprintf("subpath=%v", subpath), func(t *testing.T) {
			authz := &denyCreate{}
			px := newFixtureProxyWith(t, func(o *Config) {
				o.Authorizer = authz.authorizer()
				o.AuthorizeSubpath = subpath
			}, tokenSecret("c", up.srv.URL, upstreamCA(up.srv), "t", "None"))
			srv := proxyServer(t, px, alice, false)
			before := len(up.requests())
			status := rawUpgrade(t, srv, "/c/proxy/api/v1/namespaces/default/pods/p/exec?command=id", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}})
			if !strings.HasPrefix(status, "HTTP/1.1 403") {
				t.Fatalf("exec over WebSocket without create: %q, want 403", status)
			}
			if n := len(up.requests()) - before; n != 0 {
				t.Fatalf("the cluster received %d requests", n)
			}
			authz.mu.Lock()
			calls := authz.calls
			authz.mu.Unlock()
			if len(calls) == 0 || calls[0].GetVerb() != "create" || calls[0].GetSubresource() != "proxy" {
				t.Fatalf("authorizer calls %v, want create on clustergateways/proxy first", calls)
			}
			// An ordinary GET still needs only get.
			rec := serveAs(px, "c", "/api/v1/namespaces/default/pods", alice, httptest.NewRequest(http.MethodGet, "/x", nil))
			if rec.Code != http.StatusOK {
				t.Fatalf("get pods: %d %s", rec.Code, rec.Body)
			}
		})
	}
	// With create on the proxy but not on the inner pods/exec.
	innerOnly := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if a.GetVerb() == "create" && a.GetSubresource() == "exec" {
			return authorizer.DecisionDeny, "read-only", nil
		}
		return authorizer.DecisionAllow, "", nil
	})
	px := newFixtureProxyWith(t, func(o *Config) { o.Authorizer, o.AuthorizeSubpath = innerOnly, true },
		tokenSecret("c", up.srv.URL, upstreamCA(up.srv), "t", "None"))
	srv := proxyServer(t, px, alice, false)
	before := len(up.requests())
	if status := rawUpgrade(t, srv, "/c/proxy/api/v1/namespaces/default/pods/p/exec?command=id", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}}); !strings.HasPrefix(status, "HTTP/1.1 403") {
		t.Fatalf("exec with get but not create on pods/exec: %q, want 403", status)
	}
	if n := len(up.requests()) - before; n != 0 {
		t.Fatalf("the cluster received %d requests", n)
	}
}

// A gateway whose address resolves into a denied range is refused with 403,
// before a connection is made: the name is resolved by the real resolver
// (localhost, from /etc/hosts) and checked on the address dialed.
func TestEndpointPolicyAfterResolution(t *testing.T) {
	up := newCapture(t)
	_, port, _ := net.SplitHostPort(up.srv.Listener.Addr().String())
	opts := endpointpolicy.Config{DenyCIDRs: []string{"127.0.0.1/32", "::1/128"}}
	policy, err := opts.Policy()
	if err != nil {
		t.Fatal(err)
	}
	px := newFixtureProxyWith(t, func(o *Config) { o.Pool = newTestPool(t, 4, 2*time.Second, policy) },
		tokenSecret("named", "https://localhost:"+port, upstreamCA(up.srv), "t", "None"),
		tokenSecret("literal", "https://[::ffff:127.0.0.1]:"+port, upstreamCA(up.srv), "t", "None"))
	for _, gw := range []string{"named", "literal"} {
		rec := serveAs(px, gw, "/api", alice, httptest.NewRequest(http.MethodGet, "/x", nil))
		if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "endpoint policy") || !strings.Contains(rec.Body.String(), "127.0.0.1") {
			t.Errorf("%s: %d %s, want 403 naming the policy and the address", gw, rec.Code, rec.Body)
		}
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("the denied address received %d requests", n)
	}
}

func TestWebSocketBearerScrubbed(t *testing.T) {
	tok := base64.RawURLEncoding.EncodeToString([]byte("client-token"))
	h := http.Header{"Sec-Websocket-Protocol": {"base64url.bearer.authorization.k8s.io." + tok + ", v5.channel.k8s.io", "v4.channel.k8s.io"}}
	scrubClientHeaders(h)
	if got := h.Values("Sec-Websocket-Protocol"); len(got) != 1 || got[0] != "v5.channel.k8s.io, v4.channel.k8s.io" {
		t.Fatalf("subprotocols after scrubbing: %q", got)
	}
	h = http.Header{"Sec-Websocket-Protocol": {"BASE64URL.BEARER.AUTHORIZATION.K8S.IO." + tok}}
	scrubClientHeaders(h)
	if len(h) != 0 {
		t.Fatalf("a bearer-only subprotocol list must go away entirely: %v", h)
	}
	// Two spellings: each keeps its own subprotocols, under its own name
	// (before, one spelling's replaced the other's).
	for range 20 { // map order varies
		h = http.Header{
			"Sec-Websocket-Protocol": {"v5.channel.k8s.io, base64url.bearer.authorization.k8s.io." + tok},
			"sec_websocket_protocol": {"base64url.bearer.authorization.k8s.io." + tok + ", v4.channel.k8s.io"},
			"sec-websocket-protocol": {"x.BASE64URL.BEARER.AUTHORIZATION.K8S.IO." + tok},
		}
		scrubClientHeaders(h)
		want := http.Header{"Sec-Websocket-Protocol": {"v5.channel.k8s.io"}, "sec_websocket_protocol": {"v4.channel.k8s.io"}}
		if !reflect.DeepEqual(h, want) {
			t.Fatalf("subprotocols under two spellings after scrubbing: %q, want %q", h, want)
		}
	}
}
