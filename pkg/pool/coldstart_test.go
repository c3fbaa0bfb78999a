package pool

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
)

// concurrently sends n GETs of path over one lease each, released together,
// and returns their errors and bodies.
func concurrently(t *testing.T, p *Pool, tg *Target, base *url.URL, path string, n int) ([]error, []string) {
	t.Helper()
	errs, bodies := make([]error, n), make([]string, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			l, err := p.Acquire(tg)
			if err != nil {
				errs[i] = err
				return
			}
			defer l.Release()
			<-start
			_, bodies[i], errs[i] = get(context.Background(), l.Transport(), base, path)
		})
	}
	close(start)
	wg.Wait()
	return errs, bodies
}

// Requests that arrive together at an entry without a connection share one
// dial and handshake, not one each (an HTTP/2 connection serves them all).
func TestColdStartDialsOnce(t *testing.T) {
	u := newUpstream(t)
	p := newTestPool(t, Options{Capacity: 8})
	tg := u.target(t, "c1", "client-1")
	errs, bodies := concurrently(t, p, tg, u.url, "/hello", 16)
	for i, err := range errs {
		if err != nil || !strings.HasPrefix(bodies[i], "HTTP/2.0") {
			t.Fatalf("request %d: %v %q", i, err, bodies[i])
		}
	}
	if d, a := p.Stats().Dials, u.accepted.Load(); d != 1 || a != 1 {
		t.Fatalf("16 concurrent first requests made %d dials (%d connections accepted), want 1", d, a)
	}
}

// When the one dial fails, the requests that waited for it fail with its
// error at once, rather than each dialing (and timing out) in turn.
func TestColdStartSharesTheDialError(t *testing.T) {
	// Accepts TCP and never answers the TLS handshake: a hung cluster.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			_ = c.Close()
		}
	})
	ca := testpki.MustCA(t, "ca")
	p := newTestPool(t, Options{Capacity: 8, DialTimeout: 300 * time.Millisecond})
	base := &url.URL{Scheme: "https", Host: ln.Addr().String()}
	tg := &Target{Cluster: "hung", Address: base, CAData: ca.CertPEM}
	began := time.Now()
	errs, _ := concurrently(t, p, tg, base, "/hello", 8)
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "TLS handshake") {
			t.Fatalf("request %d: %v, want the handshake's timeout", i, err)
		}
	}
	if d := p.Stats().Dials; d != 1 {
		t.Fatalf("8 concurrent first requests to a hung cluster made %d dials, want 1", d)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("the requests took %v to fail; one dial timeout is 300ms", took)
	}
}

// An HTTP/1.1-only cluster still gets a connection per concurrent request:
// the first request's dial opens the way, and net/http dials the rest.
func TestColdStartHTTP1(t *testing.T) {
	serverCA, clientCA := testpki.MustCA(t, "server-ca"), testpki.MustCA(t, "client-ca")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(50 * time.Millisecond) // keep each connection busy
		_, _ = w.Write([]byte(r.Proto))
	}))
	serving := serverCA.MustIssue(t, testpki.Spec{CommonName: "upstream", IPs: []string{"127.0.0.1"}, Server: true})
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serving.TLS()}, NextProtos: []string{"http/1.1"}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	base, _ := url.Parse(srv.URL)
	client := clientCA.MustIssue(t, testpki.Spec{CommonName: "c", Client: true})
	p := newTestPool(t, Options{Capacity: 8})
	tg := &Target{Cluster: "h1", Address: base, CAData: serverCA.CertPEM, CertData: client.CertPEM, KeyData: client.KeyPEM}
	errs, bodies := concurrently(t, p, tg, base, "/", 4)
	for i, err := range errs {
		if err != nil || bodies[i] != "HTTP/1.1" {
			t.Fatalf("request %d: %v %q", i, err, bodies[i])
		}
	}
	if d := p.Stats().Dials; d < 2 {
		t.Fatalf("4 concurrent requests to an HTTP/1.1 cluster made %d dials; they cannot share one connection", d)
	}
}

// A request waiting for another's dial gives up with its own context.
func TestColdStartWaiterCancelled(t *testing.T) {
	c := &coldStart{e: &entry{}}
	c.dial = &awaitedDial{done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://127.0.0.1/", nil)
	if _, err := c.RoundTrip(req); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled waiter: %v, want context.Canceled", err)
	}
}
