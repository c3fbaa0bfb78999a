package pool

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"weak"

	"golang.org/x/net/http2"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
	"github.com/clustergateway/cluster-gateway/internal/testpoll"
)

// surplusKey marks the request whose dials the test follows.
type surplusKey struct{}

// A request that finds the connections full has net/http dial one; x/net
// closes it unused when another connection has room by then
// (addConnIfNeeded), and if that room is taken before the request asks
// for a stream, net/http dials again. Under CPU load this repeated five
// times in a healthy burst, and the fifth dial was refused as if the
// cluster ended the connections (TestBurstBeyondTheStreamsIsNotRefused, 1
// run in 8 with 4 busy loops). Here it happens five times in a row, with
// x/net's own pool deciding: the test hooks only pause the request at two
// points (before x/net gets its new connection, and before it asks for a
// stream), which CPU load cannot be made to do on demand. A dial whose
// connection x/net closed unused is not counted; the one it kept is.
func TestSurplusConnectionsDoNotCountAsRedials(t *testing.T) {
	const surplus = maxDialsPerRequest + 1 // the old bound refused the last
	serverCA, clientCA := testpki.MustCA(t, "server-ca"), testpki.MustCA(t, "client-ca")
	var mu sync.Mutex
	holds := map[string]chan struct{}{}
	held := map[string]bool{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name, ok := strings.CutPrefix(r.URL.Path, "/hold/"); ok {
			mu.Lock()
			ch := holds[name]
			held[name] = true
			mu.Unlock()
			<-ch
		}
		_, _ = w.Write([]byte(r.Proto))
	}))
	srv.EnableHTTP2 = true
	srv.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: 1} // one holder fills a connection
	serving := serverCA.MustIssue(t, testpki.Spec{CommonName: "upstream", IPs: []string{"127.0.0.1"}, Server: true})
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serving.TLS()}, NextProtos: []string{"h2"}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	client := clientCA.MustIssue(t, testpki.Spec{CommonName: "c", Client: true})
	tg := &Target{Cluster: "surplus", Address: u, CAData: serverCA.CertPEM, CertData: client.CertPEM, KeyData: client.KeyPEM}

	p := newTestPool(t, Options{Capacity: 8})
	l := acquire(t, p, tg)
	defer l.Release()
	e := l.e

	// The holders: each holds the one stream of connection A until let go.
	var wg sync.WaitGroup
	var holderErrs []error
	holder := 0
	hold := func() string {
		name := fmt.Sprint(holder)
		holder++
		mu.Lock()
		holds[name] = make(chan struct{})
		mu.Unlock()
		wg.Go(func() {
			if _, _, err := get(context.Background(), l.Transport(), u, "/hold/"+name); err != nil {
				mu.Lock()
				holderErrs = append(holderErrs, fmt.Errorf("holder %s: %w", name, err))
				mu.Unlock()
			}
		})
		testpoll.EventuallyTrue(t, hostileRequestDeadline, "holder "+name+" reached the cluster", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return held[name]
		})
		return name
	}
	let := func(name string) {
		mu.Lock()
		close(holds[name])
		mu.Unlock()
	}
	defer func() { // a failed test: let every holder end
		mu.Lock()
		for _, ch := range holds {
			select {
			case <-ch:
			default:
				close(ch)
			}
		}
		mu.Unlock()
		wg.Wait()
	}()
	// streams is what connection A (the only one handed out) carries and
	// allows.
	connA := func() http2.ClientConnState {
		e.h2.mu.Lock()
		defer e.h2.mu.Unlock()
		if len(e.h2.checks) != 1 {
			t.Errorf("%d connections handed out, want only A", len(e.h2.checks))
		}
		for cc := range e.h2.checks {
			return cc.State()
		}
		return http2.ClientConnState{}
	}
	inUse := func(s http2.ClientConnState) int { return s.StreamsActive + s.StreamsReserved + s.StreamsPending }

	current := hold() // dials A
	testpoll.EventuallyTrue(t, hostileRequestDeadline, "A allows one stream (the cluster's SETTINGS)", func() bool {
		return connA().MaxConcurrentStreams == 1
	})

	atGet, goGet := make(chan struct{}), make(chan struct{})
	atOffer, goOffer := make(chan struct{}), make(chan struct{})
	ctx := withRequestDials(context.WithValue(context.Background(), surplusKey{}, true))
	dials := ctx.Value(requestDialsKey{}).(*requestDials)
	testHookGetClientConn = func(req *http.Request) {
		if req.Context().Value(surplusKey{}) != nil {
			atGet <- struct{}{}
			<-goGet
		}
	}
	testHookOffer = func(c *trackedConn) {
		if c.dials == dials {
			atOffer <- struct{}{}
			<-goOffer
		}
	}
	t.Cleanup(func() { testHookGetClientConn, testHookOffer = nil, nil })

	done := make(chan error, 1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, hostileRequestDeadline)
		defer cancel()
		_, _, err := get(rctx, l.Transport(), u, "/r")
		done <- err
	}()
	offered, emptied := 0, 0
	var err error
wait:
	for {
		select {
		case <-atGet:
			// It asks for a stream: A has none free.
			if inUse(connA()) == 0 {
				current = hold()
			}
			goGet <- struct{}{}
		case <-atOffer:
			// Its new connection goes to x/net: for the first ones A has
			// room by then, so x/net closes the new one unused.
			offered++
			if emptied < surplus {
				let(current)
				testpoll.EventuallyTrue(t, hostileRequestDeadline, "A's stream ended", func() bool { return inUse(connA()) == 0 })
				emptied++
			}
			goOffer <- struct{}{}
		case err = <-done:
			break wait
		}
	}
	testHookGetClientConn, testHookOffer = nil, nil
	let(current)
	wg.Wait()
	if err != nil {
		if errors.Is(err, ErrConnectionsUnusable) {
			t.Fatalf("after %d connections x/net closed unused (%d offered to it): %v", emptied, offered, err)
		}
		t.Fatal(err)
	}
	for _, err := range holderErrs {
		t.Error(err)
	}
	if offered != surplus+1 {
		t.Fatalf("the request's connections offered to x/net: %d, want %d unused and the one it kept", offered, surplus)
	}
	if n, s := dials.n.Load(), dials.surplus.Load(); n != 1 || s != surplus {
		t.Fatalf("the request's dials: %d counted, %d given back; want 1 (the connection x/net kept) and %d", n, s, surplus)
	}
	st := p.Stats()
	if n := st.RefusedDials[RefusedRedials] + st.RefusedDials[RefusedCapped]; n != 0 {
		t.Fatalf("%d dials refused: %+v", n, st)
	}
	testpoll.EventuallyTrue(t, hostileRequestDeadline, "x/net closed the unused connections", func() bool {
		return p.Stats().OpenConns == 2 // A and the one the request kept
	})
}

// A request whose connections x/net keeps closing unused gets its dials
// back only up to maxSurplusPerRequest: a cluster that has one connection
// show room and take it back cannot make a request dial without end.
func TestSurplusGiveBacksAreBounded(t *testing.T) {
	var d requestDials
	for range maxSurplusPerRequest + 3 {
		d.n.Add(1) // admitted
		d.giveBack(nil, nil)
	}
	if n := d.n.Load(); n != 3 {
		t.Fatalf("%d dials counted after %d given back of %d, want 3", n, maxSurplusPerRequest, maxSurplusPerRequest+3)
	}
}

// A pooled connection keeps nothing of the request that had it dialed: a
// request's context (through the gateway, its headers, audit event and
// server stream) kept for the connection's life cost 8-10 KiB per pooled
// cluster in the scan bench.
func TestPooledConnectionKeepsNoRequestContext(t *testing.T) {
	up := newUpstream(t)
	p := newTestPool(t, Options{Capacity: 8})
	l := acquire(t, p, up.target(t, "ctx", "client-1"))
	defer l.Release()
	type bigKey struct{}
	for i, path := range []string{"cold start", "net/http's dial"} {
		big := new([64 << 10]byte)
		gone := weak.Make(big)
		ctx := context.WithValue(context.Background(), bigKey{}, big)
		if i == 1 {
			// A request that finds the connection closed has net/http dial.
			l.e.closeIdle()
			testpoll.EventuallyTrue(t, hostileRequestDeadline, "the idle connection closed", func() bool { return p.Stats().OpenConns == 0 })
		}
		if _, _, err := get(ctx, l.Transport(), up.url, "/hello"); err != nil {
			t.Fatal(err)
		}
		big, ctx = nil, nil
		runtime.GC()
		runtime.GC()
		if gone.Value() != nil {
			t.Fatalf("%s: the request's context is still reachable with its connection pooled (%d open)", path, p.Stats().OpenConns)
		}
		if n := p.Stats().OpenConns; n != 1 {
			t.Fatalf("%s: %d connections open, want the one pooled", path, n)
		}
	}
}
