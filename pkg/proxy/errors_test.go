package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"
)

// realErrors are produced by real operations on loopback, not built by hand,
// so the mapping is checked against what the transports actually return.
func realErrors(t *testing.T) map[string]error {
	t.Helper()
	up := newTLSUpstream(t, http.NotFoundHandler())
	errs := map[string]error{}

	// A TLS server whose certificate no trusted CA signed.
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12}}}
	_, err := c.Get(up.URL)
	c.CloseIdleConnections()
	errs["unknown authority"] = err

	// A port nobody listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, err = net.Dial("tcp", addr)
	errs["refused"] = fmt.Errorf("cluster %q: dial %s: %w", "c1", addr, err)

	// Plain HTTP where TLS was expected.
	plain := httptest.NewServer(http.NotFoundHandler())
	defer plain.Close()
	conn, err := tls.Dial("tcp", plain.Listener.Addr().String(), &tls.Config{InsecureSkipVerify: true})
	if conn != nil {
		conn.Close()
	}
	errs["not TLS"] = err

	// A deadline that passes while waiting.
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	<-ctx.Done()
	errs["deadline"] = fmt.Errorf("round trip: %w", ctx.Err())
	errs["dial deadline"] = fmt.Errorf("cluster %q: dial %s: %w", "c1", addr, ctx.Err())
	return errs
}

func TestUpstreamErrorMapping(t *testing.T) {
	want := map[string]struct {
		code int32
		text string
	}{
		"unknown authority": {http.StatusBadGateway, "does not trust"},
		"not TLS":           {http.StatusBadGateway, "did not answer with TLS"},
		"refused":           {http.StatusServiceUnavailable, "unreachable"},
		"deadline":          {http.StatusGatewayTimeout, "did not answer in time"},
		"dial deadline":     {http.StatusServiceUnavailable, "within the dial timeout"},
	}
	for name, err := range realErrors(t) {
		t.Run(name, func(t *testing.T) {
			if err == nil {
				t.Fatal("the operation did not fail")
			}
			// Only the request's own deadline makes a 504; a dial that ran out of time is unreachable.
			st := upstreamError("c1", err, name == "deadline").ErrStatus
			if st.Code != want[name].code || !strings.Contains(st.Message, want[name].text) || !strings.Contains(st.Message, `"c1"`) {
				t.Errorf("upstreamError(%v) = %d %q, want %d mentioning %q and the cluster", err, st.Code, st.Message, want[name].code, want[name].text)
			}
		})
	}
	if errors.Is(realErrors(t)["refused"], context.DeadlineExceeded) {
		t.Fatal("a refused dial must not look like a deadline")
	}
}

// The same mapping through the whole request path. (A request that
// outlives its own deadline is answered by the server's timeout filter:
// TestRequestTimeoutIsAlways504.)
func TestProxyUpstreamErrors(t *testing.T) {
	up := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	other := newTLSUpstream(t, http.NotFoundHandler()) // its CA is not the upstream's
	closed := closedAddress(t)

	px := newFixtureProxy(t,
		tokenSecret("ok", up.URL, upstreamCA(up), "t", "None"),
		tokenSecret("untrusted", up.URL, upstreamCA(other), "t", "None"),
		tokenSecret("refused", closed, upstreamCA(up), "t", "None"),
		tokenSecret("unusable", "http://127.0.0.1:1", nil, "t", "None"))

	for _, tc := range []struct {
		gateway, path string
		code          int
		text          string
	}{
		{"ok", "/healthz", http.StatusOK, ""},
		{"untrusted", "/healthz", http.StatusBadGateway, "does not trust"},
		{"refused", "/healthz", http.StatusServiceUnavailable, "unreachable"},
		{"unusable", "/healthz", http.StatusServiceUnavailable, "cannot be used"},
		{"missing", "/healthz", http.StatusNotFound, "not found"},
	} {
		t.Run(tc.gateway+tc.path, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/x", nil)
			rec := serveAs(px, tc.gateway, tc.path, &user.DefaultInfo{Name: "admin"}, req)
			if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.text) {
				t.Errorf("status %d %s, want %d mentioning %q", rec.Code, rec.Body, tc.code, tc.text)
			}
		})
	}
}
