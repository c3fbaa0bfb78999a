package pool

// A managed cluster is outside the hub's trust: how many connections a
// hostile or broken one can make the gateway open, and how often. The
// clusters here speak raw HTTP/2 frames: no real kube-apiserver can be made
// to refuse every stream or send GOAWAY on every new connection.

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
)

// hostileH2 is a cluster that completes TLS choosing HTTP/2 and then does
// what behave says with each connection; accepted counts the connections.
type hostileH2 struct {
	url      *url.URL
	target   *Target
	accepted atomic.Int64
}

func newHostileH2(t *testing.T, behave func(c net.Conn, fr *http2.Framer)) *hostileH2 {
	t.Helper()
	serverCA, clientCA := testpki.MustCA(t, "server-ca"), testpki.MustCA(t, "client-ca")
	serving := serverCA.MustIssue(t, testpki.Spec{CommonName: "upstream", IPs: []string{"127.0.0.1"}, Server: true})
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{serving.TLS()}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	h := &hostileH2{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				if _, err := io.ReadFull(c, make([]byte, len(http2.ClientPreface))); err != nil {
					return
				}
				behave(c, http2.NewFramer(c, c))
			})
		}
	})
	h.url = &url.URL{Scheme: "https", Host: ln.Addr().String()}
	client := clientCA.MustIssue(t, testpki.Spec{CommonName: "c", Client: true})
	h.target = &Target{Cluster: "hostile", Address: h.url, CAData: serverCA.CertPEM, CertData: client.CertPEM, KeyData: client.KeyPEM}
	return h
}

// serveFrames answers SETTINGS and PING as a server must, and each request
// with onHeaders, until the connection ends.
func serveFrames(fr *http2.Framer, onHeaders func(streamID uint32)) {
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = fr.WritePing(true, f.Data)
			}
		case *http2.HeadersFrame:
			if onHeaders != nil {
				onHeaders(f.StreamID)
			}
		}
	}
}

// hostileLoad sends requests through one lease for d, from workers
// goroutines, each with a deadline of a second, while a healthy cluster in
// the same pool is asked too; it returns the hostile cluster's errors.
func hostileLoad(t *testing.T, p *Pool, h *hostileH2, workers int, d time.Duration) []error {
	t.Helper()
	good := newUpstream(t)
	gl := acquire(t, p, good.target(t, "good", "client-1"))
	defer gl.Release()
	l := acquire(t, p, h.target)
	defer l.Release()
	var mu sync.Mutex
	var errs []error
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for time.Now().Before(end) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, _, err := get(ctx, l.Transport(), h.url, "/x")
				cancel()
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	for time.Now().Before(end) {
		if _, body := mustGet(t, gl.Transport(), good.url, "/hello"); !strings.HasPrefix(body, "HTTP/2.0") {
			t.Errorf("the healthy cluster answered %q next to the hostile one", body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	return errs
}

// dialBound is the most dials the pacing allows in d, with room for the
// healthy cluster's one and the scheduling of the last second.
func dialBound(d time.Duration) int64 {
	return redialBurst + int64(redialRate*(d.Seconds()+1)) + 1
}

// A cluster that sends GOAWAY on every new connection, or closes it right
// after the TLS handshake: net/http and x/net dialed it again at once, in a
// loop, for every request in flight (about 450 handshakes a second per
// request here before the dials were paced). The dials are paced now, and a
// request that would wait too long for its turn fails at once, saying why.
func TestHostileClusterRedialsArePaced(t *testing.T) {
	for name, behave := range map[string]func(net.Conn, *http2.Framer){
		"goaway": func(c net.Conn, fr *http2.Framer) {
			_ = fr.WriteSettings()
			_ = fr.WriteGoAway(0, http2.ErrCodeNo, nil)
			serveFrames(fr, nil)
		},
		"close": func(c net.Conn, fr *http2.Framer) {},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHostileH2(t, behave)
			p := newTestPool(t, Options{Capacity: 8})
			const d = 3 * time.Second
			errs := hostileLoad(t, p, h, 8, d)
			if dials, bound := p.Stats().Dials, dialBound(d); dials > bound {
				t.Fatalf("%d dials in %v (%d connections accepted), want at most %d", dials, d, h.accepted.Load(), bound)
			}
			unusable := 0
			for _, err := range errs {
				if err == nil {
					t.Fatal("a request to the hostile cluster succeeded")
				}
				if errors.Is(err, ErrConnectionsUnusable) {
					unusable++
				}
			}
			if unusable == 0 {
				t.Fatalf("none of %d failed requests says why (first: %v), want %v", len(errs), errs[0], ErrConnectionsUnusable)
			}
			if n := p.Stats().RefusedDials[RefusedPaced]; n == 0 {
				t.Fatalf("no refused dial counted as %q", RefusedPaced)
			}
		})
	}
}

// A health probe of a cluster that has no pooled entry gets an entry of its
// own for its one request: it dials at most probeDials times, whatever the
// cluster does with the connections.
func TestHostileClusterProbeDialsTwice(t *testing.T) {
	h := newHostileH2(t, func(c net.Conn, fr *http2.Framer) {
		_ = fr.WriteSettings()
		_ = fr.WriteGoAway(0, http2.ErrCodeNo, nil)
		serveFrames(fr, nil)
	})
	p := newTestPool(t, Options{Capacity: 8})
	err := p.Probe(h.target, func(rt http.RoundTripper) error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, _, err := get(ctx, rt, h.url, "/readyz")
		return err
	})
	if !errors.Is(err, ErrConnectionsUnusable) {
		t.Fatalf("the probe ended with %v, want %v", err, ErrConnectionsUnusable)
	}
	if a := h.accepted.Load(); a > probeDials {
		t.Fatalf("the probe made %d connections, want at most %d", a, probeDials)
	}
}

// A cluster that allows no streams (SETTINGS_MAX_CONCURRENT_STREAMS 0) and
// refuses any that comes: every request made a new connection, each kept
// open (it answers pings), 9,500 after 20 requests here, until the gateway
// ran out of file descriptors. The open connections stop at the cap now,
// and then requests fail at once without a dial.
func TestHostileClusterConnectionsAreCapped(t *testing.T) {
	h := newHostileH2(t, func(c net.Conn, fr *http2.Framer) {
		_ = fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 0})
		serveFrames(fr, func(id uint32) { _ = fr.WriteRSTStream(id, http2.ErrCodeRefusedStream) })
	})
	const max = 4
	p := newTestPool(t, Options{Capacity: 8, MaxConnsPerCluster: max})
	const d = 3 * time.Second
	errs := hostileLoad(t, p, h, 8, d)
	st := p.Stats()
	if open := st.OpenConns - 1; open > max { // one is the healthy cluster's
		t.Fatalf("%d connections to the hostile cluster are open (%d dials), want at most %d", open, st.Dials, max)
	}
	if bound := dialBound(d); st.Dials > bound {
		t.Fatalf("%d dials in %v, want at most %d", st.Dials, d, bound)
	}
	var capped error
	for _, err := range errs {
		if errors.Is(err, ErrConnectionsUnusable) && strings.Contains(err.Error(), "--pool-max-connections-per-cluster") {
			capped = err
		}
	}
	if capped == nil {
		t.Fatalf("no request failed at the cap (of %d, first: %v)", len(errs), errs[0])
	}
	if n := p.Stats().RefusedDials[RefusedCapped]; n == 0 {
		t.Fatalf("no refused dial counted as %q", RefusedCapped)
	}
	t.Logf("%d requests, %d dials; at the cap: %v", len(errs), st.Dials, capped)
}
