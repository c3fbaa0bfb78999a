package proxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzHeaderHygiene sends requests with arbitrary client headers (names as
// sent, non-canonical ones included, and a Connection header that may name
// any of them) through the whole request path. Whatever the client sends,
// what reaches the cluster carries exactly the gateway's identity: its token,
// the hub caller's impersonation in Caller mode and nothing else, and none
// of the client's credentials (bearer subprotocols included).
// Fuzz it with: go test -run '^$' -fuzz FuzzHeaderHygiene -fuzztime 1m ./pkg/proxy/
func FuzzHeaderHygiene(f *testing.F) {
	seeds := []string{
		"Authorization: Bearer client\nImpersonate-User: system:admin\nImpersonate-Group: system:masters",
		"Connection: Impersonate-User, Impersonate-Group, Authorization\nAccept: application/json",
		"impersonate-user: root\nIMPERSONATE-GROUP: system:masters\nimpersonate_uid: 0\nX_Remote_User: mallory",
		"X-Remote-User: mallory\nX-Remote-Group: system:masters\nX-Remote-Extra-Scopes: all\nCookie: s=1\nProxy-Authorization: Basic eDp5",
		"Sec-WebSocket-Protocol: base64url.bearer.authorization.k8s.io.Y2xpZW50, v5.channel.k8s.io\nSec_WebSocket_Protocol: Base64Url.Bearer.Authorization.K8s.Io.eA",
		"Connection: close, Impersonate-Extra-Scopes\nImpersonate-Extra-Scopes: admin\nImpersonate-Uid: 1",
	}
	for _, s := range seeds {
		f.Add(s, true)
		f.Add(s, false)
	}
	up := newCapture(f)
	px := newFixtureProxyWith(f, nil,
		tokenSecret("caller", up.srv.URL, upstreamCA(up.srv), "gw-token", "Caller"),
		tokenSecret("none", up.srv.URL, upstreamCA(up.srv), "gw-token-2", "None"))

	f.Fuzz(func(t *testing.T, raw string, caller bool) {
		h := http.Header{}
		for _, line := range strings.Split(raw, "\n") {
			k, v, ok := strings.Cut(line, ":")
			if ok && k != "" {
				h[k] = append(h[k], strings.TrimSpace(v)) // as sent: not canonicalized
			}
		}
		gw, token := "none", "gw-token-2"
		if caller {
			gw, token = "caller", "gw-token"
		}
		req := httptest.NewRequest(http.MethodGet, "/x", nil)
		req.Header = h
		before := len(up.requests())
		serveAs(px, gw, "/api/v1/namespaces", alice, req)
		reqs := up.requests()
		if len(reqs) == before {
			return // refused before the wire (e.g. a header the transport cannot send): nothing leaked
		}
		got := reqs[len(reqs)-1].Header
		if caller {
			wantIdentity(t, got, token, alice)
		} else {
			wantIdentity(t, got, token, nil)
		}
		for k, vs := range got {
			if !strings.EqualFold(strings.ReplaceAll(k, "_", "-"), "Sec-WebSocket-Protocol") {
				continue
			}
			for _, v := range vs {
				if strings.Contains(strings.ToLower(v), wsBearerPrefix) {
					t.Errorf("the client's bearer subprotocol reached the cluster: %s: %q", k, v)
				}
			}
		}
	})
}
