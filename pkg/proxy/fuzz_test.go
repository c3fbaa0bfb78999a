package proxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzHeaderHygiene sends requests with arbitrary client headers (names as
// sent, non-canonical ones included, and a Connection header that may name
// any of them) through the whole request path, to a gateway of every kind
// with the impersonation mode asked for (caller: Caller, else None): a
// stored token or client certificate, a token or TLS Secret read from a
// credential source, a provider's token or certificate. Whatever the client
// sends, what reaches the cluster carries exactly the gateway's identity:
// its token if it has one (an X.509 gateway sends no Authorization at all),
// its client certificate if it has one, the hub caller's impersonation in
// Caller mode and nothing else, and none of the client's credentials (bearer
// subprotocols included).
// Fuzz it with: go test -run '^$' -fuzz FuzzHeaderHygiene -fuzztime 1m ./pkg/proxy/
func FuzzHeaderHygiene(f *testing.F) {
	seeds := []string{
		"Authorization: Bearer client\nImpersonate-User: system:admin\nImpersonate-Group: system:masters",
		"Connection: Impersonate-User, Impersonate-Group, Authorization\nAccept: application/json",
		"impersonate-user: root\nIMPERSONATE-GROUP: system:masters\nimpersonate_uid: 0\nX_Remote_User: mallory",
		"X-Remote-User: mallory\nX-Remote-Group: system:masters\nX-Remote-Extra-Scopes: all\nCookie: s=1\nProxy-Authorization: Basic eDp5",
		"Sec-WebSocket-Protocol: base64url.bearer.authorization.k8s.io.Y2xpZW50, v5.channel.k8s.io\nSec_WebSocket_Protocol: Base64Url.Bearer.Authorization.K8s.Io.eA",
		"Connection: close, Impersonate-Extra-Scopes\nImpersonate-Extra-Scopes: admin\nImpersonate-Uid: 1",
		// A hub bearer token with cookies and front-proxy headers, as a
		// caller straight to the gateway's port sends them.
		"Authorization: Bearer hub-token\nCookie: session=alice\nX-Remote-User: mallory\nX-Remote-Extra-Example.com%2ftenant%3aid: t",
		"Connection: Authorization, Cookie, X-Remote-User\nauthorization: Bearer hub-token\ncookie: a=b\nx-remote-group: system:masters",
	}
	for _, s := range seeds {
		f.Add(s, true)
		f.Add(s, false)
	}
	kf := newKindsFixture(f)

	f.Fuzz(func(t *testing.T, raw string, caller bool) {
		h := http.Header{}
		for _, line := range strings.Split(raw, "\n") {
			k, v, ok := strings.Cut(line, ":")
			if ok && k != "" {
				h[k] = append(h[k], strings.TrimSpace(v)) // as sent: not canonicalized
			}
		}
		for _, k := range kf.kinds {
			if k.caller != caller {
				continue
			}
			req := httptest.NewRequest(http.MethodGet, "/x", nil)
			req.Header = h.Clone()
			before := len(kf.up.requests())
			serveAs(kf.px, k.gateway, "/api/v1/namespaces", alice, req)
			reqs := kf.up.requests()
			if len(reqs) == before {
				continue // refused before the wire (e.g. a header the transport cannot send): nothing leaked
			}
			got := reqs[len(reqs)-1]
			failed := t.Failed()
			k.want(t, got, alice)
			if t.Failed() && !failed {
				t.Logf("through gateway %s", k.gateway)
			}
			for name, vs := range got.Header {
				if !strings.EqualFold(strings.ReplaceAll(name, "_", "-"), "Sec-WebSocket-Protocol") {
					continue
				}
				for _, v := range vs {
					if strings.Contains(strings.ToLower(v), wsBearerPrefix) {
						t.Errorf("%s: the client's bearer subprotocol reached the cluster: %s: %q", k.gateway, name, v)
					}
				}
			}
		}
	})
}
