package pool

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// upstream is an in-process stand-in for a managed cluster's API server.
type upstream struct {
	srv      *httptest.Server
	url      *url.URL
	serverCA *testCA // signs the serving certificate
	clientCA *testCA // signs client certificates it accepts
	accepted atomic.Int64
	closed   atomic.Int64
}

// newUpstream serves h2 and http/1.1 over TLS on 127.0.0.1, asks for (but
// does not require) a client certificate, and counts accepted connections.
func newUpstream(t testing.TB) *upstream {
	t.Helper()
	u := &upstream{serverCA: newTestCA(t, "server-ca"), clientCA: newTestCA(t, "client-ca")}
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		cn := ""
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			cn = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		fmt.Fprintf(w, "%s %s", r.Proto, cn)
	})
	mux.HandleFunc("/watch", watchHandler)
	mux.HandleFunc("/upgrade", upgradeEchoHandler)
	u.srv = httptest.NewUnstartedServer(mux)
	u.srv.EnableHTTP2 = true
	clientRoots := x509.NewCertPool()
	clientRoots.AddCert(u.clientCA.cert)
	u.srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{u.serverCA.serverCert(t)},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    clientRoots,
		NextProtos:   []string{"h2", "http/1.1"},
	}
	u.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			u.accepted.Add(1)
		case http.StateClosed, http.StateHijacked:
			u.closed.Add(1)
		}
	}
	u.srv.StartTLS()
	t.Cleanup(u.srv.Close)
	var err error
	if u.url, err = url.Parse(u.srv.URL); err != nil {
		t.Fatal(err)
	}
	return u
}

// target trusts the upstream's CA and presents a client certificate.
func (u *upstream) target(t testing.TB, cluster, clientCN string) *Target {
	t.Helper()
	cert, key := u.clientCA.issue(t, clientCN, x509.ExtKeyUsageClientAuth)
	addr := *u.url
	return &Target{Cluster: cluster, Address: &addr, CAData: u.serverCA.pem, CertData: cert, KeyData: key}
}

// watchHandler streams a line every few milliseconds until the client goes
// away, like a watch.
func watchHandler(w http.ResponseWriter, r *http.Request) {
	f := w.(http.Flusher)
	w.WriteHeader(http.StatusOK)
	f.Flush()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
			if _, err := io.WriteString(w, "tick\n"); err != nil {
				return
			}
			f.Flush()
		}
	}
}

// upgradeEchoHandler switches to a raw echo protocol, like exec's SPDY.
func upgradeEchoHandler(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Upgrade") != "echo" || r.ProtoMajor != 1 {
		http.Error(w, "want HTTP/1.1 Upgrade: echo, got "+r.Proto, http.StatusBadRequest)
		return
	}
	conn, brw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	_ = brw.Flush()
	_, _ = io.Copy(conn, brw)
}

// get sends GET path through rt and returns the body.
func get(ctx context.Context, rt http.RoundTripper, base *url.URL, path string) (*http.Response, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base.String()+path, nil)
	if err != nil {
		return nil, "", err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// mustGet is get for the calling test goroutine.
func mustGet(t testing.TB, rt http.RoundTripper, base *url.URL, path string) (*http.Response, string) {
	t.Helper()
	resp, body, err := get(context.Background(), rt, base, path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", path, resp.Status, body)
	}
	return resp, body
}

// eventually polls cond until it holds or the deadline passes. Deadlines are
// generous: they catch hangs, they do not measure speed.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count fds: %v", err)
	}
	return len(ents)
}
