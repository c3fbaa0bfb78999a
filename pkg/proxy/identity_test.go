package proxy

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
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

// Through the whole request path: the client's credentials and claimed
// identities are dropped, the gateway's token is sent, and with
// impersonation Caller the hub caller is who the managed cluster sees.
func TestProxyIdentityHeaders(t *testing.T) {
	var mu sync.Mutex
	var got http.Header
	up := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Clone()
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"NamespaceList","apiVersion":"v1","items":[]}`))
	}))
	px := newFixtureProxy(t,
		tokenSecret("caller", up.URL, upstreamCA(up), "gw-token", "Caller"),
		tokenSecret("none", up.URL, upstreamCA(up), "gw-token-2", "None"))
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{"developers", user.AllAuthenticated},
		Extra: map[string][]string{"authentication.kubernetes.io/node-name": {"n1"}}}

	for _, tc := range []struct {
		gateway, token string
		impersonate    bool
	}{{"caller", "gw-token", true}, {"none", "gw-token-2", false}} {
		t.Run(tc.gateway, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/whatever", nil)
			req.Header = hostileHeaders()
			rec := serveAs(px, tc.gateway, "/api/v1/namespaces", alice, req)
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			mu.Lock()
			h := got
			mu.Unlock()
			if a := h.Values("Authorization"); len(a) != 1 || a[0] != "Bearer "+tc.token {
				t.Errorf("Authorization upstream = %v, want only the gateway's token", a)
			}
			for _, k := range []string{"Proxy-Authorization", "Cookie", "X-Remote-User", "X-Remote-Group", "X-Remote-Extra-Scopes", "Impersonate-Uid", "Impersonate-Extra-Scopes"} {
				if v, ok := h[k]; ok {
					t.Errorf("%s reached the managed cluster: %v", k, v)
				}
			}
			if h.Get("Accept") != "application/json" {
				t.Errorf("Accept was not forwarded: %v", h)
			}
			if tc.impersonate {
				if u, g := h.Values("Impersonate-User"), h.Values("Impersonate-Group"); !reflect.DeepEqual(u, []string{"alice"}) || !reflect.DeepEqual(g, []string{"developers"}) {
					t.Errorf("impersonation upstream: user %v groups %v, want [alice] [developers]", u, g)
				}
			} else if v, ok := h["Impersonate-User"]; ok {
				t.Errorf("impersonation None but Impersonate-User %v reached the managed cluster", v)
			}
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
