package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"sort"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/authentication/user"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/transport"
)

// hostileHeaders are what a client (or the hub, for its own hop) may send
// that must never reach a managed cluster.
func hostileHeaders() http.Header {
	h := http.Header{}
	h.Set("Authorization", "Bearer hub-token")
	h.Set("Proxy-Authorization", "Basic eDp5")
	h.Set("Cookie", "session=1")
	h.Set("Impersonate-User", "root")
	h.Add("Impersonate-Group", "system:masters")
	h.Set("Impersonate-Uid", "0")
	h.Set("Impersonate-Extra-Scopes", "all")
	h["impersonate-user"] = []string{"lowercase-root"} // not canonicalised
	h.Set("X-Remote-User", "mallory")
	h.Set("X-Remote-Group", "system:masters")
	h.Set("X-Remote-Extra-Scopes", "all")
	h.Set("Accept", "application/json")
	h.Set("User-Agent", "kubectl/v1.37")
	return h
}

func TestScrubClientHeaders(t *testing.T) {
	h := hostileHeaders()
	scrubClientHeaders(h)
	var left []string
	for k := range h {
		left = append(left, k)
	}
	sort.Strings(left)
	if want := []string{"Accept", "User-Agent"}; !reflect.DeepEqual(left, want) {
		t.Fatalf("headers left after scrubClientHeaders: %v, want only %v", left, want)
	}
}

func TestSetImpersonation(t *testing.T) {
	u := &user.DefaultInfo{
		Name:   "alice",
		UID:    "alice-uid",
		Groups: []string{"developers", user.AllAuthenticated, "oncall"},
		Extra: map[string][]string{
			"scopes":                                     {"view", "edit"},
			"authentication.kubernetes.io/pod-name":      {"p"},
			"authentication.kubernetes.io/credential-id": {"JTI=1"},
			"example.com/team name":                      {"platform"},
		},
	}
	h := http.Header{}
	setImpersonation(h, u)
	want := http.Header{
		"Impersonate-User":                            {"alice"},
		"Impersonate-Uid":                             {"alice-uid"},
		"Impersonate-Group":                           {"developers", "oncall"},
		"Impersonate-Extra-Scopes":                    {"view", "edit"},
		"Impersonate-Extra-Example.com%2fteam%20name": {"platform"},
	}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("impersonation headers\n got %v\nwant %v", h, want)
	}

	h = http.Header{}
	setImpersonation(h, &user.DefaultInfo{Name: "bob"})
	if len(h) != 1 || h.Get("Impersonate-User") != "bob" {
		t.Fatalf("a user without UID, groups or extras: %v, want only Impersonate-User", h)
	}
}

// Through the whole request path, for a gateway of every kind (token or
// client certificate, stored, read from a Secret or from a provider; None
// and Caller): the client's credentials and claimed identities are dropped,
// the gateway's token (if it has one) is sent, and with impersonation
// Caller the hub caller is who the managed cluster sees.
func TestProxyIdentityHeaders(t *testing.T) {
	f := newKindsFixture(t)
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{"developers", user.AllAuthenticated},
		Extra: map[string][]string{"authentication.kubernetes.io/node-name": {"n1"}}}

	for _, k := range f.kinds {
		t.Run(k.gateway, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/whatever", nil)
			req.Header = hostileHeaders()
			n := len(f.up.requests())
			rec := serveAs(f.px, k.gateway, "/api/v1/namespaces", alice, req)
			got := f.up.requests()[n:]
			if rec.Code != http.StatusOK || len(got) != 1 {
				t.Fatalf("status %d (%s); the cluster received %d requests, want 1", rec.Code, rec.Body, len(got))
			}
			h := got[0].Header
			if a := h.Values("Authorization"); k.token != "" && (len(a) != 1 || a[0] != "Bearer "+k.token) {
				t.Errorf("Authorization upstream = %v, want only the gateway's token", a)
			} else if k.token == "" && len(a) != 0 {
				t.Errorf("Authorization upstream = %v, want none: the gateway's identity is its client certificate", a)
			}
			for _, key := range []string{"Proxy-Authorization", "Cookie", "X-Remote-User", "X-Remote-Group", "X-Remote-Extra-Scopes", "Impersonate-Uid", "Impersonate-Extra-Scopes"} {
				if v, ok := h[key]; ok {
					t.Errorf("%s reached the managed cluster: %v", key, v)
				}
			}
			if h.Get("Accept") != "application/json" {
				t.Errorf("Accept was not forwarded: %v", h)
			}
			if k.caller {
				if u, g := h.Values("Impersonate-User"), h.Values("Impersonate-Group"); !reflect.DeepEqual(u, []string{"alice"}) || !reflect.DeepEqual(g, []string{"developers"}) {
					t.Errorf("impersonation upstream: user %v groups %v, want [alice] [developers]", u, g)
				}
			} else if v, ok := h["Impersonate-User"]; ok {
				t.Errorf("impersonation None but Impersonate-User %v reached the managed cluster", v)
			}
			k.want(t, got[0], alice)
		})
	}
}

// identityHeader's in-place comparison agrees with lower-casing the name
// and reading '_' as '-', for every spelling of the names it must catch and
// for names that only look like them.
func TestIdentityHeaderFolding(t *testing.T) {
	slow := func(name string) bool {
		n := strings.ReplaceAll(strings.ToLower(name), "_", "-")
		return n == "authorization" || n == "proxy-authorization" || n == "cookie" ||
			strings.HasPrefix(n, "impersonate-") || strings.HasPrefix(n, "x-remote-")
	}
	for _, name := range []string{
		"Authorization", "authorization", "AUTHORIZATION", "Proxy-Authorization", "proxy_authorization", "Cookie", "COOKIE",
		"Impersonate-User", "impersonate_group", "Impersonate-Extra-Scopes", "IMPERSONATE-UID", "X-Remote-User", "x_remote_extra_a",
		"Authorizations", "Authorizatio", "Impersonate", "Impersonate_", "X-Remote", "X-Remote-", "Cookies", "Set-Cookie",
		"Accept", "", "Authorization\u00e9", "Coo\u212aie", "\u0130mpersonate-User",
	} {
		if got, want := identityHeader(name), slow(name); got != want {
			t.Errorf("identityHeader(%q) = %v, want %v", name, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { identityHeader("Impersonate-Extra-Scopes") }); n != 0 {
		t.Errorf("identityHeader allocates %v times per call, want 0", n)
	}
}

// trickyExtras are extra keys that url.PathEscape leaves invalid in a header
// name (':', '=', '@', ...), or that only survive exact escaping ('%', upper
// case, space), with values that must arrive as they are.
var trickyExtras = map[string][]string{
	"example.com/tenant:id": {"t-1", "t-2"},
	"scope=admin":           {"read=all"},
	"user@example.com":      {"a b"},
	"a%2Fb":                 {"%2F"},
	"UPPER/Case":            {"Mixed Case"},
	"with space":            {""},
	"plus+dollar$amp&":      {"x"},
	"caf\u00e9":             {"\u00e9t\u00e9"},
	"scopes":                {"view", "edit"},
}

// extrasAsServerReads reads the Impersonate-Extra-* headers of h as
// kube-apiserver's impersonation filter does (k8s.io/apiserver
// pkg/endpoints/filters/impersonation: the name's suffix lower-cased, then
// url.PathUnescape), failing on a name that is not a valid header name or
// does not decode.
func extrasAsServerReads(t *testing.T, h http.Header) map[string][]string {
	t.Helper()
	const prefix = "impersonate-extra-"
	out := map[string][]string{}
	for name, vs := range h {
		if !strings.HasPrefix(strings.ToLower(name), prefix) {
			continue
		}
		if !httpguts.ValidHeaderFieldName(name) {
			t.Errorf("header name %q is not a valid HTTP header name", name)
		}
		key, err := url.PathUnescape(strings.ToLower(name[len(prefix):]))
		if err != nil {
			t.Errorf("header %q does not decode: %v", name, err)
			continue
		}
		out[key] = append(out[key], vs...)
	}
	return out
}

// Extra keys become valid header names that decode, as kube-apiserver
// decodes them, to exactly the caller's keys; values are sent as they are.
func TestImpersonationExtraKeysEncoded(t *testing.T) {
	h := http.Header{}
	setImpersonation(h, &user.DefaultInfo{Name: "alice", Extra: trickyExtras})
	if got := extrasAsServerReads(t, h); !reflect.DeepEqual(got, trickyExtras) {
		t.Errorf("extras as kube-apiserver reads them\n got %q\nwant %q\nheaders %q", got, trickyExtras, h)
	}
	// The lower-case keys are encoded exactly as client-go encodes them.
	for k, want := range map[string]string{
		"example.com/tenant:id": "Impersonate-Extra-Example.com%2ftenant%3aid",
		"scope=admin":           "Impersonate-Extra-Scope%3dadmin",
		"a%2fb":                 "Impersonate-Extra-A%252fb",
		"with space":            "Impersonate-Extra-With%20space",
	} {
		h := http.Header{}
		setImpersonation(h, &user.DefaultInfo{Name: "alice", Extra: map[string][]string{k: {"v"}}})
		if _, ok := h[want]; !ok {
			t.Errorf("extra %q: headers %q, want %s", k, h, want)
		}
	}
}

// For keys without upper-case letters the header names are client-go's own
// (its impersonating round tripper, which kubectl uses), byte for byte.
func TestImpersonationExtraKeysAsClientGo(t *testing.T) {
	for b := 0; b < 256; b++ {
		if 'A' <= b && b <= 'Z' {
			continue
		}
		key := "k" + string([]byte{byte(b)}) + "/x"
		var want http.Header
		rt := transport.NewImpersonatingRoundTripper(transport.ImpersonationConfig{UserName: "alice", Extra: map[string][]string{key: {"v"}}},
			roundTripFunc(func(req *http.Request) (*http.Response, error) { want = req.Header; return nil, io.EOF }))
		_, _ = rt.RoundTrip(httptest.NewRequest(http.MethodGet, "/", nil))
		got := http.Header{}
		setImpersonation(got, &user.DefaultInfo{Name: "alice", Extra: map[string][]string{key: {"v"}}})
		if !reflect.DeepEqual(got, want) {
			t.Errorf("extra key %q: headers %q, client-go sends %q", key, got, want)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// The reverse side: extras arrive from the hub's aggregator as
// X-Remote-Extra- headers (client-go's SetAuthProxyHeaders), which
// k8s.io/apiserver's request-header authenticator decodes into the caller
// the gateway impersonates; the cluster reads back exactly the hub
// caller's keys. (The hub itself lower-cases impersonated keys, and the
// request-header authenticator lower-cases what it reads, so keys from the
// hub are lower case.)
func TestImpersonationExtraKeysFromFrontProxy(t *testing.T) {
	hub := map[string][]string{
		"example.com/tenant:id": {"t-1", "t-2"},
		"scope=admin":           {"read=all"},
		"user@example.com":      {"a b"},
		"a%2fb":                 {"%2F"},
		"with space":            {"v"},
	}
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	transport.SetAuthProxyHeaders(req, "alice", "", []string{"developers"}, hub)
	authn, err := headerrequest.New([]string{"X-Remote-User"}, []string{"X-Remote-Uid"}, []string{"X-Remote-Group"}, []string{"X-Remote-Extra-"})
	if err != nil {
		t.Fatal(err)
	}
	resp, ok, err := authn.AuthenticateRequest(req)
	if err != nil || !ok {
		t.Fatalf("request-header authentication: %v %v", ok, err)
	}
	h := http.Header{}
	setImpersonation(h, resp.User)
	if got := extrasAsServerReads(t, h); !reflect.DeepEqual(got, hub) {
		t.Errorf("extras at the cluster, as kube-apiserver reads them\n got %q\nwant the hub caller's %q", got, hub)
	}
}

// The same through the whole request path, at the cluster: ordinary requests
// over HTTP/1.1 and HTTP/2 and an upgrade, which UpgradeAwareHandler writes
// itself (an invalid header name would be dropped there without a word).
func TestImpersonationExtraKeysAtTheCluster(t *testing.T) {
	up := newCapture(t)
	px := newFixtureProxy(t, tokenSecret("c", up.srv.URL, upstreamCA(up.srv), "gw-token", "Caller"))
	caller := &user.DefaultInfo{Name: "alice", UID: "a-1", Groups: []string{"developers"}, Extra: trickyExtras}
	check := func(t *testing.T, h http.Header) {
		t.Helper()
		if got := extrasAsServerReads(t, h); !reflect.DeepEqual(got, trickyExtras) {
			t.Errorf("extras at the cluster, as kube-apiserver reads them\n got %q\nwant %q", got, trickyExtras)
		}
		if u, g := h.Values("Impersonate-User"), h.Values("Impersonate-Group"); !reflect.DeepEqual(u, []string{"alice"}) || !reflect.DeepEqual(g, []string{"developers"}) {
			t.Errorf("user %q groups %q at the cluster, want [alice] [developers]", u, g)
		}
	}
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("http2=%v", h2), func(t *testing.T) {
			srv := proxyServer(t, px, caller, h2)
			n := len(up.requests())
			resp, err := srv.Client().Get(srv.URL + "/c/proxy/api/v1/namespaces")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || len(up.requests()) != n+1 {
				t.Fatalf("status %d (%s); the cluster received %d requests, want 1", resp.StatusCode, body, len(up.requests())-n)
			}
			check(t, up.last(t).Header)
		})
	}
	t.Run("upgrade", func(t *testing.T) {
		srv := proxyServer(t, px, caller, false)
		n := len(up.requests())
		status := rawUpgrade(t, srv, "/c/proxy/api/v1/namespaces/default/pods/p/exec?command=id", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}})
		if !strings.HasPrefix(status, "HTTP/1.1 101") || len(up.requests()) != n+1 {
			t.Fatalf("upgrade answered %q; the cluster received %d requests, want 1", status, len(up.requests())-n)
		}
		check(t, up.last(t).Header)
	})
}

// The health subresource in Caller mode sends the same encoded extras.
func TestImpersonationExtraKeysInHealthProbe(t *testing.T) {
	up := newCapture(t)
	px := newFixtureProxy(t, tokenSecret("c", up.srv.URL, upstreamCA(up.srv), "gw-token", "Caller"))
	ctx := apirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "alice", Extra: trickyExtras})
	if h, err := px.Probe(ctx, "c"); err != nil || !h.Healthy {
		t.Fatalf("probe: %+v %v", h, err)
	}
	if got := extrasAsServerReads(t, up.last(t).Header); !reflect.DeepEqual(got, trickyExtras) {
		t.Errorf("extras the probe sent, as kube-apiserver reads them\n got %q\nwant %q", got, trickyExtras)
	}
}

// An identity that HTTP headers cannot carry unchanged (a control byte, or
// white space at either end, which HTTP/1.1 trims and an upgrade request's
// writer rewrites) is refused with 403 before anything is sent, on every
// path, rather than impersonating someone else on the cluster.
func TestImpersonationValuesHeadersCannotCarry(t *testing.T) {
	up := newCapture(t)
	px := newFixtureProxy(t, tokenSecret("c", up.srv.URL, upstreamCA(up.srv), "gw-token", "Caller"))
	for name, caller := range map[string]*user.DefaultInfo{
		"user with leading space":   {Name: " alice"},
		"user with trailing tab":    {Name: "alice\t"},
		"uid with DEL":              {Name: "alice", UID: "a\x7f"},
		"group with NUL":            {Name: "alice", Groups: []string{"dev\x00s"}},
		"extra value with CRLF":     {Name: "alice", Extra: map[string][]string{"scopes": {"view\r\nImpersonate-Group: system:masters"}}},
		"extra value with new line": {Name: "alice", Extra: map[string][]string{"scopes": {"view\nedit"}}},
	} {
		t.Run(name, func(t *testing.T) {
			srv := proxyServer(t, px, caller, false)
			n := len(up.requests())
			resp, err := srv.Client().Get(srv.URL + "/c/proxy/api/v1/namespaces")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "cannot carry") {
				t.Errorf("ordinary request: %d %s; want 403 saying why", resp.StatusCode, body)
			}
			status := rawUpgrade(t, srv, "/c/proxy/api/v1/namespaces/default/pods/p/exec?command=id", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}})
			if !strings.HasPrefix(status, "HTTP/1.1 403") {
				t.Errorf("upgrade answered %q, want 403", status)
			}
			ctx := apirequest.WithUser(context.Background(), caller)
			if h, err := px.Probe(ctx, "c"); err == nil {
				t.Errorf("health probe: %+v, want it refused", h)
			}
			if got := up.requests()[n:]; len(got) != 0 {
				t.Errorf("the cluster received %d requests, want none; first: %q", len(got), got[0].Header)
			}
		})
	}
}
