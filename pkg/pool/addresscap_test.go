package pool

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
	"github.com/clustergateway/cluster-gateway/internal/testpoll"
)

// MaxConnsPerCluster caps the HTTP/2 connections to each of a cluster's
// addresses, not to the cluster as a whole (--pool-max-connections-per-cluster:
// "to each of its API-server addresses"): with two addresses that allow one
// stream per connection and hold every request, each takes exactly the cap,
// and one more request to either is refused at the cap without a dial. A
// cap shared by the addresses refuses the second address's connections; a
// cap on the first address only lets the second open more.
func TestConnectionCapIsPerAddress(t *testing.T) {
	const max = 2
	serverCA, clientCA := testpki.MustCA(t, "server-ca"), testpki.MustCA(t, "client-ca")
	release := make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	held := make([]atomic.Int64, 2)
	var urls []*url.URL
	for i, ip := range []string{"127.0.0.1", "127.0.0.2"} {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			held[i].Add(1)
			<-release
			_, _ = w.Write([]byte(ip))
		}))
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatalf("listen on %s (all of 127.0.0.0/8 reaches lo on Linux): %v", ip, err)
		}
		srv.Listener.Close()
		srv.Listener = l
		srv.EnableHTTP2 = true
		srv.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: 1}
		serving := serverCA.MustIssue(t, testpki.Spec{CommonName: "apiserver", IPs: []string{ip}, Server: true})
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{serving.TLS()}, NextProtos: []string{"h2"}}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		t.Cleanup(free) // before Close, which waits for the held requests
		u, _ := url.Parse(srv.URL)
		urls = append(urls, u)
	}
	client := clientCA.MustIssue(t, testpki.Spec{CommonName: "gateway", Client: true})
	tg := &Target{Cluster: "ha", Address: urls[0], Additional: urls[1:], CAData: serverCA.CertPEM, CertData: client.CertPEM, KeyData: client.KeyPEM}
	p := newTestPool(t, Config{Capacity: 4, MaxConnsPerCluster: max})
	l := acquire(t, p, tg)
	defer l.Release()

	ctx, cancel := context.WithTimeout(context.Background(), hostileRequestDeadline) // against a hang only
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer free()
	errs := make(chan error, 2*max)
	heldNow := func() int64 { return held[0].Load() + held[1].Load() }
	// Requests go to each address in turn; each waits for the one before to
	// be held, so it needs a connection of its own.
	for i := range 2 * max {
		wg.Go(func() {
			_, _, err := get(ctx, l.Transport(), urls[0], "/hold")
			errs <- err
		})
		var ended error
		testpoll.Eventually(t, hostileRequestDeadline, fmt.Sprintf("request %d held by its address", i+1), func() error {
			select {
			case ended = <-errs:
				return nil // it will never be held
			default:
			}
			if heldNow() != int64(i+1) {
				return fmt.Errorf("%d held", heldNow())
			}
			return nil
		})
		if ended != nil || heldNow() != int64(i+1) {
			t.Fatalf("request %d ended before the cluster held it: %v (held: %d at the first address, %d at the second; %+v)", i+1, ended, held[0].Load(), held[1].Load(), p.Stats())
		}
	}
	if a, b := held[0].Load(), held[1].Load(); a != max || b != max {
		t.Fatalf("held requests: %d at the first address, %d at the second; want %d each", a, b, max)
	}
	if st := p.Stats(); st.OpenConns != 2*max {
		t.Fatalf("%d connections open, want %d: %d to each address", st.OpenConns, 2*max, max)
	}

	// Each address is at its cap: one more request to each is refused
	// without a dial.
	dials := p.Stats().Dials
	for i := range 2 {
		beyond, cancel := context.WithTimeout(context.Background(), hostileRequestDeadline) // against a hang only
		_, _, err := get(beyond, l.Transport(), urls[0], "/hold")
		cancel()
		if !errors.Is(err, ErrConnectionsUnusable) || !strings.Contains(err.Error(), "--pool-max-connections-per-cluster") {
			t.Errorf("request %d beyond both caps: %v, want it refused at the cap", i+1, err)
		}
	}
	st := p.Stats()
	if a, b := held[0].Load(), held[1].Load(); a != max || b != max {
		t.Errorf("after the requests beyond the caps: %d and %d held, want still %d each", a, b, max)
	}
	if st.OpenConns != 2*max || st.Dials != dials || st.RefusedDials[RefusedCapped] < 2 {
		t.Errorf("beyond the caps: %d connections open (want %d), %d dials made (want none), %d refused as capped (want 2 or more)",
			st.OpenConns, 2*max, st.Dials-dials, st.RefusedDials[RefusedCapped])
	}

	free()
	for range 2 * max {
		if err := <-errs; err != nil {
			t.Errorf("a held request: %v", err)
		}
	}
}
