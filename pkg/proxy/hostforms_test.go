package proxy

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/clustergateway/cluster-gateway/pkg/gateways"
)

// Secrets stored before hosts in other IPv4 forms were refused by the API:
// "127.1" and "0x7f000001" are 127.0.0.1 to a forward proxy, an agent or a
// cgo resolver, but names to netip, so the endpoint policy did not judge
// them. Such a gateway answers 503 saying what to write and is never
// dialed; the other gateways keep working.
func TestStoredOtherIPv4FormCannotBeUsed(t *testing.T) {
	var reached atomic.Int32
	up := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(up.URL, "https://"))
	viaProxy := tokenSecret("proxied", up.URL, upstreamCA(up), "t", "None")
	viaProxy.Data[gateways.KeyProxyURL] = []byte("http://0x7f000001:" + port)
	px := newFixtureProxy(t,
		tokenSecret("ok", up.URL, upstreamCA(up), "t", "None"),
		tokenSecret("short", "https://127.1:"+port, upstreamCA(up), "t", "None"),
		tokenSecret("decimal", "https://2130706433:"+port, upstreamCA(up), "t", "None"),
		viaProxy)
	for _, name := range []string{"short", "decimal", "proxied"} {
		rec := serveAs(px, name, "/healthz", &user.DefaultInfo{Name: "admin"}, httptest.NewRequest(http.MethodGet, "/x", nil))
		if body := rec.Body.String(); rec.Code != http.StatusServiceUnavailable || !strings.Contains(body, "cannot be used") ||
			!strings.Contains(body, "write it in dotted-decimal form, 127.0.0.1") {
			t.Errorf("%s: %d %s, want 503 saying it cannot be used and to write the address in dotted-decimal form", name, rec.Code, body)
		}
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the upstream was reached %d times through the unusable gateways", n)
	}
	if rec := serveAs(px, "ok", "/healthz", &user.DefaultInfo{Name: "admin"}, httptest.NewRequest(http.MethodGet, "/x", nil)); rec.Code != http.StatusOK || reached.Load() != 1 {
		t.Errorf("the well-formed gateway: %d %s, want 200 from the upstream", rec.Code, rec.Body)
	}
}
