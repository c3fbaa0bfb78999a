package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
)

// stepCaller is a hub caller whose groups and extras exercise every rule of
// the impersonation the step adds: a group the cluster adds itself, a
// service-account-only extra, and extra keys with '/', ':' and '='.
var stepCaller = &user.DefaultInfo{
	Name: "bob", UID: "bob-uid", Groups: []string{"developers", user.AllAuthenticated},
	Extra: map[string][]string{
		"example.com/tenant:id":                 {"t-1"},
		"scope=admin":                           {"read=all"},
		"authentication.kubernetes.io/pod-name": {"p"},
	},
}

// The identity step (identity.replace, and the two round trippers that run
// it last before the wire) leaves a request with exactly the gateway's
// identity, for every identity a gateway can have: a token or none (X.509,
// whose identity is in the TLS config), acting as itself or as the caller.
// Whatever credential or claimed identity the client sent, in any spelling,
// is gone, and everything else is kept. Changing a request's header in a
// way that depends on the identity (scrubbing only when there is a token to
// set, say) fails here.
func TestIdentityStep(t *testing.T) {
	identities := []struct {
		name string
		id   identity
	}{
		{"token/None", identity{token: "gw-token"}},
		{"token/Caller", identity{token: "gw-token", caller: stepCaller}},
		{"X.509/None", identity{}},
		{"X.509/Caller", identity{caller: stepCaller}},
	}
	// Each case: what the client sent, and what of it must be kept.
	cases := []struct {
		name       string
		sent, kept http.Header
	}{
		{"hub credentials", http.Header{
			"Authorization":       {"Bearer hub-token"},
			"authorization":       {"Bearer hub-token-2"},
			"Proxy-Authorization": {"Basic eDp5"},
			"Cookie":              {"session=alice"},
			"cookie":              {"csrf=1"},
			"Accept":              {"application/json"},
		}, http.Header{"Accept": {"application/json"}}},
		{"front-proxy headers", http.Header{
			"X-Remote-User":         {"mallory"},
			"X-Remote-Group":        {"system:masters"},
			"X-Remote-Uid":          {"0"},
			"X-Remote-Extra-Scopes": {"all"},
			"X-Remote-Extra-Example.com%2ftenant%3aid": {"t-0"},
			"X-Remote-Extra-Scope%3dadmin":             {"write=all"},
			"x_remote_user":                            {"mallory"},
			"X-REMOTE-GROUP":                           {"system:masters"},
			"User-Agent":                               {"kubectl/v1.37"},
		}, http.Header{"User-Agent": {"kubectl/v1.37"}}},
		{"claimed impersonation", http.Header{
			"Impersonate-User":                            {"system:admin"},
			"impersonate-group":                           {"system:masters"},
			"IMPERSONATE_UID":                             {"0"},
			"Impersonate-Extra-Scopes":                    {"all"},
			"Impersonate-Extra-Example.com%2ftenant%3aid": {"t-0"},
			"Impersonate-Extra-example.com/tenant:id":     {"t-0"},
			"Impersonate-Extra-scope=admin":               {"write=all"},
			"impersonate_extra_scope%3dadmin":             {"write=all"},
			"Content-Type":                                {"application/json"},
		}, http.Header{"Content-Type": {"application/json"}}},
		{"WebSocket bearer subprotocols", http.Header{
			"Sec-Websocket-Protocol": {"base64url.bearer.authorization.k8s.io.aHVi, v5.channel.k8s.io"},
			"sec_websocket_protocol": {"x.BASE64URL.BEARER.AUTHORIZATION.K8S.IO.aHVi, v4.channel.k8s.io"},
			"Sec-WebSocket-Protocol": {"Base64Url.Bearer.Authorization.K8s.Io.aHVi"},
		}, http.Header{"Sec-Websocket-Protocol": {"v5.channel.k8s.io"}, "sec_websocket_protocol": {"v4.channel.k8s.io"}}},
		{"Connection naming the identity headers", http.Header{
			"Connection":       {"Impersonate-User, Impersonate-Group, Authorization, Cookie, X-Remote-User"},
			"Impersonate-User": {"system:admin"},
			"Authorization":    {"Bearer hub-token"},
			"Accept":           {"*/*"},
		}, http.Header{"Accept": {"*/*"}}},
	}
	var all, allKept http.Header = http.Header{}, http.Header{}
	for _, c := range cases {
		for k, v := range c.sent {
			all[k] = append(all[k], v...)
		}
		for k, v := range c.kept {
			allKept[k] = append(allKept[k], v...)
		}
	}
	cases = append(cases, struct {
		name       string
		sent, kept http.Header
	}{"everything at once", all, allKept})

	for _, ident := range identities {
		for _, c := range cases {
			t.Run(ident.name+"/"+c.name, func(t *testing.T) {
				want := c.kept.Clone()
				if ident.id.token != "" {
					want.Set("Authorization", "Bearer "+ident.id.token)
				}
				if ident.id.caller != nil {
					setImpersonation(want, ident.id.caller)
				}
				// A request's Connection header is the reverse proxy's to
				// act on (before this step, for ordinary requests) and the
				// upgrade's to replace (WrapRequest, below).
				withoutConnection := func(h http.Header) http.Header {
					h = h.Clone()
					for k := range h {
						if http.CanonicalHeaderKey(k) == "Connection" {
							delete(h, k)
						}
					}
					return h
				}
				check := func(step string, got http.Header, want http.Header) {
					t.Helper()
					if !reflect.DeepEqual(got, want) {
						t.Errorf("%s: headers\n got %q\nwant %q", step, got, want)
					}
					if ident.id.caller != nil {
						if extras := extrasAsServerReads(t, got); !reflect.DeepEqual(extras, map[string][]string{"example.com/tenant:id": {"t-1"}, "scope=admin": {"read=all"}}) {
							t.Errorf("%s: extras as a kube-apiserver reads them: %q, want the caller's own", step, extras)
						}
					}
				}

				h := c.sent.Clone()
				ident.id.replace(h)
				check("identity.replace", withoutConnection(h), want)

				var sent *http.Request
				base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
					sent = req
					return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(http.NoBody), Request: req}, nil
				})
				req := httptest.NewRequest(http.MethodGet, "https://cluster.example/api", nil)
				req.Header = c.sent.Clone()
				if _, err := (&upstreamTransport{base: base, id: ident.id, cluster: "c"}).RoundTrip(req); err != nil {
					t.Fatal(err)
				}
				check("upstreamTransport.RoundTrip", withoutConnection(sent.Header), want)
				if !reflect.DeepEqual(req.Header, c.sent) {
					t.Errorf("upstreamTransport.RoundTrip changed the caller's request: %q", req.Header)
				}

				up := &upstreamUpgrade{id: ident.id}
				req.Header = c.sent.Clone()
				out, err := up.WrapRequest(req)
				if err != nil {
					t.Fatal(err)
				}
				upgradeWant := want.Clone()
				upgradeWant.Set("Connection", "Upgrade")
				check("upstreamUpgrade.WrapRequest", out.Header, upgradeWant)
				if !reflect.DeepEqual(req.Header, c.sent) {
					t.Errorf("upstreamUpgrade.WrapRequest changed the request UpgradeAwareHandler logs: %q", req.Header)
				}
			})
		}
	}
}
