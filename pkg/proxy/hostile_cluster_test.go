package proxy

// A managed cluster is outside the hub's trust: what a hostile or broken one
// can make the gateway hold (time, memory, a client's answer).

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/clustergateway/cluster-gateway/internal/testfrontend"
	"github.com/clustergateway/cluster-gateway/internal/testpki"
	"github.com/clustergateway/cluster-gateway/pkg/pool"
)

// shortUpgradeProxy is a proxy whose pool and upgrade setup use short
// dial and response-header timeouts (300 ms each).
func shortUpgradeProxy(t *testing.T, up *httptest.Server) *Proxy {
	t.Helper()
	return newFixtureProxyWith(t, func(o *Config) {
		po := pool.DefaultConfig()
		po.DialTimeout, po.ResponseHeaderTimeout = 300*time.Millisecond, 300*time.Millisecond
		pl, err := pool.New(*po)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pl.Close)
		o.Pool, o.DialTimeout, o.ResponseHeaderTimeout = pl, po.DialTimeout, po.ResponseHeaderTimeout
	}, tokenSecret("c", up.URL, upstreamCA(up), "t", "None"))
}

func execRequest() *http.Request {
	req := httptest.NewRequest(http.MethodPost, "/x?command=sh&stdout=true", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "SPDY/3.1")
	return req
}

// A cluster that completes TCP and TLS and then never answers an exec
// (upgrade) request: its setup must end within the dial + response-header
// timeouts (the upgrade watchdog), as it does when the TLS handshake stalls.
func TestUpgradeToAClusterSilentAfterTLSEnds(t *testing.T) {
	block := make(chan struct{})
	up := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _, err := w.(http.Hijacker).Hijack() // read the request, answer nothing
		if err != nil {
			return
		}
		defer c.Close()
		<-block
	}))
	t.Cleanup(func() { close(block) })
	px := shortUpgradeProxy(t, up)
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- serveAs(px, "c", "/api/v1/namespaces/default/pods/p/exec", alice, execRequest()) }()
	select {
	case rec := <-done:
		if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), errUpgradeDial.Error()) {
			t.Fatalf("%d %s, want a 503 Status saying %q", rec.Code, rec.Body, errUpgradeDial)
		}
	case <-time.After(30 * time.Second): // liveness, not timing: the set-up bound is 600ms
		t.Fatal("an exec to a cluster that never answers after the TLS handshake is still waiting: the upgrade watchdog only cancels a context that nothing reads the backend connection with")
	}
}

// A cluster that answers an exec with a response header that never ends:
// the gateway must stop reading it after a bounded amount, not buffer it.
func TestUpgradeResponseHeaderIsBounded(t *testing.T) {
	const limit = 16 << 20
	var written atomic.Int64
	up := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: SPDY/3.1\r\nConnection: Upgrade\r\nX-Endless: ")
		chunk := bytes.Repeat([]byte("a"), 64<<10)
		_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		for written.Load() < 4*limit {
			n, err := c.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}))
	px := shortUpgradeProxy(t, up)
	served := make(chan struct{})
	go func() {
		defer close(served)
		serveAs(px, "c", "/api/v1/namespaces/default/pods/p/exec", alice, execRequest())
	}()
	deadline := time.After(8 * time.Second)
wait:
	for written.Load() < 4*limit {
		select {
		case <-served:
			break wait
		case <-deadline:
			break wait
		case <-time.After(50 * time.Millisecond):
		}
	}
	if n := written.Load(); n >= limit {
		t.Fatalf("the gateway read %d MiB of a single upgrade response header from the cluster (and keeps it in memory: http.ReadResponse plus UpgradeAwareHandler's copy of the raw bytes)", n>>20)
	}
}

// HTTP/2: how large a response header block a cluster can make the gateway
// decode, hold and pass on for an ordinary request. net/http's own bound
// for HTTP/1.1 responses is 1 MiB (MaxResponseHeaderBytes' default).
func TestHugeResponseHeaderRefused(t *testing.T) {
	big := strings.Repeat("a", 6<<20)
	up := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Huge", big)
		w.WriteHeader(http.StatusOK)
	}))
	px := newFixtureProxy(t, tokenSecret("c", up.URL, upstreamCA(up), "t", "None"))
	rec := serveAs(px, "c", "/api/v1/namespaces", alice, httptest.NewRequest(http.MethodGet, "/x", nil))
	if len(rec.Header().Get("X-Huge")) == len(big) {
		t.Fatalf("a 6 MiB response header from the cluster was decoded, held and passed on (%d), want it refused beyond 1 MiB", rec.Code)
	}
	if rec.Code != http.StatusBadGateway || !strings.Contains(rec.Body.String(), "response headers the gateway does not accept") {
		t.Fatalf("%d %.300s, want a 502 Status naming the response headers", rec.Code, rec.Body)
	}
}

// A cluster that sends an informational 103 (Early Hints) and then stalls
// past the request deadline: the client must still get the 504 Timeout
// Status, not an empty 200 (the status recorder takes the 1xx for the
// answer, so answerTimeout writes nothing and net/http ends the response
// with an implicit 200).
func TestInformationalThenStallIs504(t *testing.T) {
	release := make(chan struct{})
	up := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</x>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer close(release)
	px := newFixtureProxy(t, tokenSecret("c", up.URL, upstreamCA(up), "t", "None"))
	srv := testfrontend.MustStart(t, testfrontend.Handler(timedConnecter{px: px, timeout: 200 * time.Millisecond}, &user.DefaultInfo{Name: "admin"}))
	c := srv.Client()
	defer c.CloseIdleConnections()
	resp, err := c.Get(srv.ProxyURL("c") + "/api/v1/namespaces/default/pods/p/log")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("%d %q after the deadline passed, want the 504 Timeout Status", resp.StatusCode, body)
	}
}

// An exec answered 101 and then silence holds nothing once the client goes.
func TestSilent101EndsWithTheClient(t *testing.T) {
	closed := make(chan struct{})
	up := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n")
		_, _ = io.Copy(io.Discard, c) // silent; returns when the gateway closes
		close(closed)
	}))
	px := newFixtureProxy(t, tokenSecret("c", up.URL, upstreamCA(up), "t", "None"))
	srv := proxyServer(t, px, alice, false)
	conn := rawHTTP1(t, srv.URL)
	_, _ = io.WriteString(conn, "POST /c/proxy/api/v1/namespaces/default/pods/p/exec?command=sh HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n")
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.Contains(line, "101") {
		t.Fatalf("%q %v", line, err)
	}
	conn.Close()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the cluster connection of a silent exec outlived its client by 5s")
	}
}

// A cluster that answers every new HTTP/2 connection with GOAWAY (raw
// frames: no real kube-apiserver does this): each proxied request is one
// request to the pool, so it has the cluster dialed at most 4 times
// (counted by its lease's transport) and is answered
// 503 saying why, where net/http would dial in a loop until the request's
// deadline. pkg/pool's hostile tests cover the guard itself.
func TestGoAwayClusterIsDialedAFewTimesPerRequest(t *testing.T) {
	ca := testpki.MustCA(t, "upstream-ca")
	serving := ca.MustIssue(t, testpki.Spec{CommonName: "upstream", IPs: []string{"127.0.0.1"}, Server: true}).TLS()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{serving}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int64
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			wg.Go(func() {
				defer c.Close()
				if _, err := io.ReadFull(c, make([]byte, len(http2.ClientPreface))); err != nil {
					return
				}
				fr := http2.NewFramer(c, c)
				_ = fr.WriteSettings()
				_ = fr.WriteGoAway(0, http2.ErrCodeNo, nil)
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				for {
					if _, err := fr.ReadFrame(); err != nil {
						return
					}
				}
			})
		}
	})
	px := newFixtureProxy(t, tokenSecret("goaway", "https://"+ln.Addr().String(), testpki.PEM("CERTIFICATE", ca.Cert.Raw), "t", "None"))
	const requests = 3
	for i := range requests {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second) // the request timeout, bounding the loop without the guard
		rec := serveAs(px, "goaway", "/api/v1/namespaces", alice, httptest.NewRequest(http.MethodGet, "/x", nil).WithContext(ctx))
		cancel()
		if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), pool.ErrConnectionsUnusable.Error()) {
			t.Fatalf("request %d: %d %s, want a 503 Status saying %q", i, rec.Code, rec.Body, pool.ErrConnectionsUnusable)
		}
	}
	if a := accepted.Load(); a > 4*requests {
		t.Fatalf("%d requests made %d connections, want at most 4 each", requests, a)
	}
}
