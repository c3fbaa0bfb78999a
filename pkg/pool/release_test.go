package pool

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/clustergateway/cluster-gateway/internal/testpoll"
)

// A long HTTP/2 read-idle timeout: if anything still armed a health-check
// timer per connection (x/net/http2's own re-arms its timer on the read
// loop's last, failing read and never stops it), a retired entry would stay
// reachable for this long, far beyond these tests.
const longReadIdle = time.Hour

// released reports whether the entry behind w is garbage: nothing (a timer,
// a connection's read loop, a map) keeps it, its transports, its parsed
// credentials or its connections' buffers reachable.
func released[T any](w weak.Pointer[T]) bool {
	runtime.GC()
	return w.Value() == nil
}

// retiredGone waits until the pool has finished retiring (no retiring entry,
// want open connections) and then until w's entry is garbage. The wait only
// catches a hang: the entry is unreachable as soon as its connections' read
// loops have exited, whatever the read-idle timeout.
func retiredGone(t *testing.T, p *Pool, w weak.Pointer[entry], openConns int64) {
	t.Helper()
	eventually(t, "retirement to finish", func() bool {
		st := p.Stats()
		return st.Retiring == 0 && st.OpenConns == openConns
	})
	eventually(t, "the retired entry to be garbage collected", func() bool { return released(w) })
}

// useOnce acquires cluster's entry, sends one HTTP/2 GET and one HTTP/1.1
// GET on the upgrade transport (so both transports hold a connection), and
// returns a weak pointer to the entry: the test keeps no strong reference.
func useOnce(t *testing.T, p *Pool, u *upstream, cluster string) weak.Pointer[entry] {
	t.Helper()
	l := acquire(t, p, u.target(t, cluster, "client"))
	mustGet(t, l.Transport(), u.url, "/hello")
	mustGet(t, l.UpgradeTransport(), u.url, "/hello")
	w := weak.Make(l.e)
	l.Release()
	return w
}

// crowdTimerHeap makes the runtime keep stopped timers: with one P whose
// timer heap holds many far-off timers, a timer stopped during the test is
// often still in the heap, with its function, when the test looks. In
// production a stopped timer may stay there until its time would have come;
// whatever its function holds stays reachable that long.
func crowdTimerHeap(t *testing.T) {
	prev := runtime.GOMAXPROCS(1)
	timers := make([]*time.Timer, 1000)
	for i := range timers {
		timers[i] = time.AfterFunc(2*time.Hour, func() {})
	}
	t.Cleanup(func() {
		for _, tm := range timers {
			tm.Stop()
		}
		runtime.GOMAXPROCS(prev)
	})
}

// Every way out of the pool leaves a retired entry unreachable once its
// connections are closed: eviction, deletion, rotation, idleness and Close.
// No timer, live or stopped, may hold any part of it (crowdTimerHeap).
func TestRetiredEntryIsGarbage(t *testing.T) {
	crowdTimerHeap(t)
	for _, tc := range []struct {
		reason string
		retire func(t *testing.T, p *Pool, u *upstream)
		live   int64 // open connections that remain (the other entry's two)
	}{
		{ReasonEvicted, func(t *testing.T, p *Pool, u *upstream) { useOnce(t, p, u, "other") }, 2},
		{ReasonDeleted, func(t *testing.T, p *Pool, u *upstream) { p.Remove("c1", ReasonDeleted) }, 0},
		{ReasonRotated, func(t *testing.T, p *Pool, u *upstream) { useOnce(t, p, u, "c1") }, 2},
		{ReasonIdle, func(t *testing.T, p *Pool, u *upstream) {}, 0},
		{ReasonShutdown, func(t *testing.T, p *Pool, u *upstream) { p.Close() }, 0},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			u := newUpstream(t)
			opts := Config{Capacity: 1, HTTP2ReadIdleTimeout: longReadIdle}
			if tc.reason == ReasonIdle {
				opts.IdleTTL = 50 * time.Millisecond
			}
			p := newTestPool(t, opts)
			w := useOnce(t, p, u, "c1") // a fresh client certificate: c1 again rotates
			tc.retire(t, p, u)
			retiredGone(t, p, w, tc.live)
			if got := p.Stats().Retired[tc.reason]; got != 1 {
				t.Errorf("retired for %s: %d, want 1 (%v)", tc.reason, got, p.Stats().Retired)
			}
		})
	}
}

// Probe's transient entry is garbage once Probe returns.
func TestProbeEntryIsGarbage(t *testing.T) {
	u := newUpstream(t)
	p := newTestPool(t, Config{Capacity: 8, HTTP2ReadIdleTimeout: longReadIdle})
	var w weak.Pointer[http.Transport]
	err := p.Probe(u.target(t, "c1", "client"), func(rt http.RoundTripper) error {
		if _, _, err := get(context.Background(), rt, u.url, "/hello"); err != nil {
			return err
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.lru.Len() != 0 {
			return fmt.Errorf("Probe put an entry in the LRU")
		}
		// The entry holds its transport and every connection holds the
		// transport: the transport is garbage only when all of them are.
		w = weak.Make(rt.(countedDials).rt.(byURL).e.rt)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "Probe's connection to close", func() bool { return u.closed.Load() == u.accepted.Load() })
	eventually(t, "the transient entry to be garbage collected", func() bool { return released(w) })
}

// freezer relays TCP connections to an upstream until frozen: then it stops
// moving bytes either way but keeps the sockets open, as a silently dropped
// network path does.
type freezer struct {
	ln     net.Listener
	frozen chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

func newFreezer(t *testing.T, upstream string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln, frozen: make(chan struct{})}
	f.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, u)
			f.mu.Unlock()
			f.wg.Go(func() { f.pipe(u, c) })
			f.wg.Go(func() { f.pipe(c, u) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

func (f *freezer) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-f.frozen:
			// Swallow what arrives and never answer again.
			if err != nil {
				return
			}
			continue
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// A connection whose peer stopped answering is found by the health check
// and closed, failing the watch on it instead of leaving it hanging; one
// whose pings are answered stays. The checks come often (every 100ms) but
// wait long for the answer (2s), so a loaded machine slow to answer a live
// connection's ping cannot make it look dead.
func TestHealthCheckClosesSilentConnection(t *testing.T) {
	u := newUpstream(t)
	f := newFreezer(t, u.url.Host)
	p := newTestPool(t, Config{Capacity: 8, HTTP2ReadIdleTimeout: 100 * time.Millisecond, HTTP2PingTimeout: 2 * time.Second})
	tg := u.target(t, "c1", "client")
	tg.Address = &url.URL{Scheme: "https", Host: f.ln.Addr().String()}
	l := acquire(t, p, tg)
	defer l.Release()
	// Several answered pings: a healthy connection stays.
	s := startStream(t, l.Transport(), &upstream{url: tg.Address})
	eventually(t, "three answered pings", func() bool {
		if s.ended() {
			t.Fatalf("the watch ended on a healthy connection: %v", s.err)
		}
		return l.e.h2.answered.Load() >= 3
	})
	if n := l.e.h2.watched(); n != 1 {
		t.Errorf("%d connections with a health check, want 1", n)
	}
	keepsStreaming(t, s, "after its pings were answered")
	close(f.frozen)
	testpoll.EventuallyTrue(t, 30*time.Second, "the watch on the silent connection to fail", s.ended) // a hang, not a speed
	if s.err == nil {
		t.Error("the watch ended without an error")
	}
	eventually(t, "the connection to be closed and its check forgotten", func() bool {
		return p.Stats().OpenConns == 0 && l.e.h2.watched() == 0
	})
}
