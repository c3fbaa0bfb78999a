package pool

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
)

func newTestPool(t testing.TB, opts Config) *Pool {
	t.Helper()
	p := mustNew(t, opts)
	t.Cleanup(p.Close)
	return p
}

// newFakeClockPool is newTestPool on a fake clock: idleness, the janitor's
// sweeps and grace periods follow clk.Step, not how fast the machine runs.
func newFakeClockPool(t testing.TB, opts Config, clk *testingclock.FakeClock) *Pool {
	t.Helper()
	p := mustNewWithClock(t, opts, clk)
	t.Cleanup(p.Close)
	return p
}

// stepAndSweep moves clk on by the janitor's period and waits for the sweep
// that tick starts to be done.
func stepAndSweep(t *testing.T, p *Pool, clk *testingclock.FakeClock) {
	t.Helper()
	n := p.sweeps.Load()
	clk.Step(p.opts.sweepEvery())
	eventually(t, "the janitor's sweep", func() bool { return p.sweeps.Load() > n })
}

// mustNew is New with opts's zero bounds and timeouts taken from DefaultConfig.
// A zero IdleTTL (never) and RetireGrace (at once) mean what they say.
func mustNew(t testing.TB, opts Config) *Pool {
	t.Helper()
	return mustNewWithClock(t, opts, clock.RealClock{})
}

func mustNewWithClock(t testing.TB, opts Config, clk clock.WithTicker) *Pool {
	t.Helper()
	d := DefaultConfig()
	if opts.Capacity == 0 {
		opts.Capacity = d.Capacity
	}
	if opts.DialTimeout == 0 {
		opts.DialTimeout = d.DialTimeout
	}
	if opts.KeepAlive == 0 {
		opts.KeepAlive = d.KeepAlive
	}
	if opts.ResponseHeaderTimeout == 0 {
		opts.ResponseHeaderTimeout = d.ResponseHeaderTimeout
	}
	if opts.HTTP2ReadIdleTimeout == 0 {
		opts.HTTP2ReadIdleTimeout = d.HTTP2ReadIdleTimeout
	}
	if opts.HTTP2PingTimeout == 0 {
		opts.HTTP2PingTimeout = d.HTTP2PingTimeout
	}
	if opts.MaxConnsPerCluster == 0 {
		opts.MaxConnsPerCluster = d.MaxConnsPerCluster
	}
	p, err := newWithClock(opts, clk)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func acquire(t testing.TB, p *Pool, tg *Target) *Lease {
	t.Helper()
	l, err := p.Acquire(tg)
	if err != nil {
		t.Fatalf("Acquire(%s): %v", tg.Cluster, err)
	}
	return l
}

// 1,000 requests to one cluster share one entry and one HTTP/2 connection.
func TestManyRequestsShareOneEntryAndConnection(t *testing.T) {
	u := newUpstream(t)
	p := newTestPool(t, Config{Capacity: 8})
	tg := u.target(t, "c1", "client-1")

	// Warm up so concurrent requests find the connection already up (the
	// first concurrent dials could otherwise race, which is not reuse).
	l := acquire(t, p, tg)
	mustGet(t, l.Transport(), u.url, "/hello")
	l.Release()

	const workers, perWorker = 8, 125
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range perWorker {
				l, err := p.Acquire(tg)
				if err != nil {
					errs <- err
					return
				}
				resp, body, err := get(context.Background(), l.Transport(), u.url, "/hello")
				l.Release()
				if err != nil {
					errs <- err
					return
				}
				if resp.ProtoMajor != 2 || body != "HTTP/2.0 client-1" {
					errs <- fmt.Errorf("got %s %q, want HTTP/2 from client-1", resp.Proto, body)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	st := p.Stats()
	if st.Created != 1 || st.Live != 1 || p.Len() != 1 {
		t.Errorf("entries: created %d live %d, want 1 and 1", st.Created, st.Live)
	}
	if got := u.accepted.Load(); got != 1 {
		t.Errorf("upstream accepted %d connections for %d requests, want 1", got, workers*perWorker+1)
	}
	if st.Dials != 1 || st.OpenConns != 1 || st.ActiveStreams != 0 {
		t.Errorf("dials %d open %d active %d, want 1 1 0", st.Dials, st.OpenConns, st.ActiveStreams)
	}
}

// A new client certificate and CA bundle make a new entry; the old entry's
// watch keeps streaming through the grace period and is then cut. The pool
// runs on a fake clock: the watch is seen streaming at the start, half way
// and the end of the grace on the pool's clock however long the machine
// takes to show it, and nothing can end the grace early but the clock.
func TestRotationKeepsStreamUntilGrace(t *testing.T) {
	const grace = time.Second
	u := newUpstream(t)
	clk := testingclock.NewFakeClock(time.Now())
	p := newFakeClockPool(t, Config{Capacity: 8, RetireGrace: grace}, clk)

	old := u.target(t, "c1", "client-1")
	l1 := acquire(t, p, old)
	w := startStream(t, l1.Transport(), u)

	rotated := u.target(t, "c1", "client-2")
	rotated.CAData = append(append([]byte{}, u.serverCA.CertPEM...), testpki.MustCA(t, "next-ca").CertPEM...)
	if old.Fingerprint() == rotated.Fingerprint() {
		t.Fatal("rotation did not change the fingerprint")
	}
	// Acquire retires the old entry, and its grace starts on the pool's clock.
	timers := clk.Waiters()
	l2 := acquire(t, p, rotated)
	defer l2.Release()
	if clk.Waiters() != timers+1 {
		t.Fatalf("retiring the old entry set %d timers on the pool's clock, want its grace period's", clk.Waiters()-timers)
	}

	st := p.Stats()
	if st.Live != 1 || st.Retiring != 1 || st.Created != 2 || st.Retired[ReasonRotated] != 1 {
		t.Fatalf("after rotation: %+v, want 1 live, 1 retiring, 2 created, 1 rotated", st)
	}
	if _, body := mustGet(t, l2.Transport(), u.url, "/hello"); body != "HTTP/2.0 client-2" {
		t.Errorf("new lease answered %q, want the rotated client certificate", body)
	}
	if again := acquire(t, p, rotated); again.e != l2.e {
		t.Error("same fingerprint after rotation got a different entry")
	} else {
		again.Release()
	}

	// The old watch streams through the grace period (it still delivers
	// at its start, half way and just before its end) and is cut when it
	// ends, although its lease is held.
	keepsStreaming(t, w, "right after the rotation")
	clk.Step(grace / 2)
	keepsStreaming(t, w, "half way through the grace")
	clk.Step(grace/2 - time.Nanosecond)
	if clk.Waiters() != timers+1 {
		t.Fatalf("the grace timer fired before the %v grace was over", grace)
	}
	keepsStreaming(t, w, "just before the end of the grace")
	if st := p.Stats(); st.Retiring != 1 {
		t.Fatalf("the old entry finished retiring before the grace was over: %+v", st)
	}
	clk.Step(time.Nanosecond)
	eventually(t, "old watch to be cut once the grace is over", w.ended)
	eventually(t, "old entry to finish retiring", func() bool { return p.Stats().Retiring == 0 })

	// Its transport no longer dials: a caller keeping a stale lease gets
	// an error that says what to do, not a leaked connection.
	if _, _, err := get(context.Background(), l1.Transport(), u.url, "/hello"); err == nil || !strings.Contains(err.Error(), "acquire a new lease") {
		t.Errorf("request on retired lease: %v, want a retired error", err)
	}
	l1.Release()
	l1.Release() // idempotent
	st = p.Stats()
	if st.ActiveStreams != 1 || st.OpenConns != 1 {
		t.Errorf("after retirement: active %d open %d, want only the new lease and its connection", st.ActiveStreams, st.OpenConns)
	}
	if got := u.accepted.Load(); got != 2 {
		t.Errorf("upstream accepted %d connections, want 2 (one per entry)", got)
	}
}

// Remove retires at once; connections close as soon as the last lease is
// released, long before the grace period.
func TestRemoveClosesWhenLeasesDrain(t *testing.T) {
	u := newUpstream(t)
	p := newTestPool(t, Config{Capacity: 8, RetireGrace: time.Minute})
	l := acquire(t, p, u.target(t, "c1", "client-1"))
	w := startStream(t, l.Transport(), u)

	p.Remove("c1", ReasonDeleted)
	p.Remove("c1", ReasonDeleted) // nothing left to remove
	st := p.Stats()
	if p.Len() != 0 || st.Retiring != 1 || st.Retired[ReasonDeleted] != 1 {
		t.Fatalf("after Remove: len %d %+v, want 0 live, 1 retiring, 1 deleted", p.Len(), st)
	}
	before := w.lines.Load()
	eventually(t, "watch to keep streaming after Remove", func() bool { return w.lines.Load() >= before+3 })
	if w.ended() {
		t.Fatalf("watch ended right after Remove: %v", w.err)
	}

	w.stop()
	l.Release()
	eventually(t, "connections to close once the lease is released", func() bool {
		st := p.Stats()
		return st.Retiring == 0 && st.OpenConns == 0
	})
}

// Three times capacity distinct clusters never exceed capacity live entries,
// sequentially or concurrently; the least recently used goes first.
func TestCapacityBoundsLiveEntries(t *testing.T) {
	const capacity = 4
	u := newUpstream(t)
	p := newTestPool(t, Config{Capacity: capacity})
	targets := make([]*Target, 3*capacity)
	for i := range targets {
		targets[i] = u.target(t, fmt.Sprintf("c%d", i), "client")
	}

	for i, tg := range targets {
		l := acquire(t, p, tg)
		mustGet(t, l.Transport(), u.url, "/hello")
		l.Release()
		if n := p.Len(); n > capacity {
			t.Fatalf("after %d clusters: %d live entries, capacity %d", i+1, n, capacity)
		}
		if i == capacity-1 {
			acquire(t, p, targets[0]).Release() // c0 is now most recently used
		}
		if i == capacity {
			p.mu.Lock()
			_, ok := p.lru.Peek("c0")
			p.mu.Unlock()
			if !ok {
				t.Error("recently used c0 was evicted instead of the least recently used")
			}
		}
	}
	st := p.Stats()
	if st.Created != 3*capacity || st.Retired[ReasonEvicted] != 2*capacity {
		t.Errorf("created %d evicted %d, want %d and %d", st.Created, st.Retired[ReasonEvicted], 3*capacity, 2*capacity)
	}
	eventually(t, "evicted entries to close their connections", func() bool {
		st := p.Stats()
		return st.Retiring == 0 && st.OpenConns == capacity
	})

	// Concurrent churn over all clusters: the bound holds at every moment.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var over error
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if n := p.Len(); n > capacity {
				over = fmt.Errorf("%d live entries, capacity %d", n, capacity)
				return
			}
		}
	})
	var churn sync.WaitGroup
	for w := range 4 {
		churn.Go(func() {
			for i := range 100 {
				l, err := p.Acquire(targets[(w*7+i)%len(targets)])
				if err != nil {
					t.Error(err)
					return
				}
				l.Release()
			}
		})
	}
	churn.Wait()
	close(stop)
	wg.Wait()
	if over != nil {
		t.Error(over)
	}
}

// Entries unused for IdleTTL are retired; an entry with a live lease is not.
func TestIdleTTLRetires(t *testing.T) {
	const ttl = 100 * time.Millisecond
	u := newUpstream(t)
	p := newTestPool(t, Config{Capacity: 8, IdleTTL: ttl})

	l := acquire(t, p, u.target(t, "idle", "client"))
	mustGet(t, l.Transport(), u.url, "/hello")
	l.Release()
	eventually(t, "idle entry to be retired", func() bool {
		st := p.Stats()
		return p.Len() == 0 && st.Retired[ReasonIdle] == 1 && st.Retiring == 0 && st.OpenConns == 0
	})

	held := acquire(t, p, u.target(t, "busy", "client"))
	sweepsPast(t, p, ttl)
	if p.Len() != 1 {
		t.Fatal("entry with a live lease was retired as idle")
	}
	held.Release()
	eventually(t, "released entry to go idle", func() bool { return p.Len() == 0 })
	if got := p.Stats().Retired[ReasonIdle]; got != 2 {
		t.Errorf("idle retirements %d, want 2", got)
	}
}

// sweepsPast waits until the janitor has swept several times, the last ones
// more than d after the call.
func sweepsPast(t *testing.T, p *Pool, d time.Duration) {
	t.Helper()
	sweeps, since := p.sweeps.Load(), time.Now()
	eventually(t, "janitor sweeps past the timeout", func() bool {
		return time.Since(since) > 3*d && p.sweeps.Load() >= sweeps+4
	})
}

// idleConnPool is a pool that closes connections unused for timeout, with
// a lease on c1's entry that sent one GET.
func idleConnPool(t *testing.T, timeout time.Duration) (*Pool, *upstream, *Target, *Lease) {
	t.Helper()
	return idleConnPoolOn(t, timeout, clock.RealClock{})
}

// idleConnPoolOn is idleConnPool on clk.
func idleConnPoolOn(t *testing.T, timeout time.Duration, clk clock.WithTicker) (*Pool, *upstream, *Target, *Lease) {
	t.Helper()
	u := newUpstream(t)
	p := mustNewWithClock(t, Config{Capacity: 8, IdleConnTimeout: timeout}, clk)
	t.Cleanup(p.Close)
	tg := u.target(t, "c1", "client")
	l := acquire(t, p, tg)
	mustGet(t, l.Transport(), u.url, "/hello")
	return p, u, tg, l
}

// An entry unused for IdleConnTimeout has its idle connections closed, both
// transports', and stays pooled: used again, it dials anew. While a lease is
// live its connections stay.
func TestIdleConnTimeoutClosesConnectionsNotEntries(t *testing.T) {
	const timeout = 50 * time.Millisecond
	p, u, tg, l := idleConnPool(t, timeout)
	mustGet(t, l.UpgradeTransport(), u.url, "/hello")
	sweepsPast(t, p, timeout)
	if n := p.Stats().OpenConns; n != 2 || u.closed.Load() != 0 {
		t.Fatalf("under a live lease: %d open connections, %d closed by the upstream's count; want 2 and 0", n, u.closed.Load())
	}

	l.Release()
	eventually(t, "the unused entry's connections to close", func() bool {
		return p.Stats().OpenConns == 0 && u.closed.Load() == 2
	})
	if st := p.Stats(); st.Live != 1 || st.Created != 1 || len(st.Retired) != 0 {
		t.Fatalf("closing idle connections changed the entries: %+v", st)
	}
	dials := p.Stats().Dials
	l = acquire(t, p, tg)
	mustGet(t, l.Transport(), u.url, "/hello")
	l.Release()
	if st := p.Stats(); st.Dials != dials+1 || st.Created != 1 || st.OpenConns != 1 {
		t.Errorf("used again: %d dials (want %d), %d entries created (want 1), %d open connections (want 1)", st.Dials, dials+1, st.Created, st.OpenConns)
	}
}

// A connection that health probes keep using is not idle: the janitor
// leaves it open through many sweeps and timeouts of an entry without a
// lease, and closes it once the probes stop. The pool runs on a fake clock
// that moves one janitor period between probes, so the probes are never
// further apart than that on the pool's clock, however slowly a loaded
// machine runs them.
func TestProbedConnectionIsNotIdle(t *testing.T) {
	const timeout = 50 * time.Millisecond
	clk := testingclock.NewFakeClock(time.Now())
	p, u, tg, l := idleConnPoolOn(t, timeout, clk)
	l.Release()
	probe := func() {
		t.Helper()
		if err := p.Probe(tg, func(rt http.RoundTripper) error {
			_, _, err := get(context.Background(), rt, u.url, "/hello")
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	every := p.opts.sweepEvery()
	if every >= timeout {
		t.Fatalf("the janitor sweeps every %v: not within the %v timeout, the test proves nothing", every, timeout)
	}
	// Four timeouts' worth of sweeps, each one period after a probe.
	for elapsed := time.Duration(0); elapsed < 4*timeout; elapsed += every {
		probe()
		stepAndSweep(t, p, clk)
	}
	if st := p.Stats(); st.Dials != 1 || st.OpenConns != 1 {
		t.Fatalf("probed entry: %d dials, %d open connections; want 1 and 1", st.Dials, st.OpenConns)
	}
	// No more probes: the sweep after the timeout passes closes it.
	for elapsed := time.Duration(0); elapsed <= timeout; elapsed += every {
		stepAndSweep(t, p, clk)
	}
	eventually(t, "the connection to close once probes stop", func() bool { return p.Stats().OpenConns == 0 })
}

// Closing an entry's idle connections leaves a connection that carries a
// stream: x/net checks under the connection's lock.
func TestCloseIdleKeepsConnectionsWithStreams(t *testing.T) {
	u := newUpstream(t)
	p := newTestPool(t, Config{Capacity: 8})
	l := acquire(t, p, u.target(t, "c1", "client"))
	defer l.Release()
	s := startStream(t, l.Transport(), u)
	l.e.closeIdle()
	lines := s.lines.Load()
	eventually(t, "the watch to go on", func() bool { return s.lines.Load() > lines+2 })
	if s.ended() || p.Stats().OpenConns != 1 {
		t.Fatalf("closeIdle cut a connection with a stream (watch ended: %v, open connections %d)", s.ended(), p.Stats().OpenConns)
	}
	s.stop()
	// The stream is forgotten once its reset is written.
	eventually(t, "the connection without a stream to close", func() bool {
		l.e.closeIdle()
		return p.Stats().OpenConns == 0
	})
}

// Targets that cannot work are errors that say what to fix, and create
// nothing.
func TestInvalidTargets(t *testing.T) {
	u := newUpstream(t)
	p := newTestPool(t, Config{})
	cert := u.clientCA.MustIssue(t, testpki.Spec{CommonName: "c"})
	certPEM, keyPEM := cert.CertPEM, cert.KeyPEM
	otherKeyPEM := u.clientCA.MustIssue(t, testpki.Spec{CommonName: "other"}).KeyPEM
	for name, mutate := range map[string]func(*Target){
		"garbage CA":          func(t *Target) { t.CAData = []byte("garbage") },
		"whitespace CA":       func(t *Target) { t.CAData = []byte(" \n") },
		"corrupt certificate": func(t *Target) { t.CAData = []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n") },
		"truncated CA": func(t *Target) {
			t.CAData = append(append([]byte{}, u.serverCA.CertPEM...), "-----BEGIN CERTIFICATE-----\nMIIB"...)
		},
		"key in CA bundle":  func(t *Target) { t.CAData = append(append([]byte{}, u.serverCA.CertPEM...), keyPEM...) },
		"insecure with CA":  func(t *Target) { t.Insecure = true },
		"cert without key":  func(t *Target) { t.CertData, t.KeyData = certPEM, nil },
		"mismatched key":    func(t *Target) { t.CertData, t.KeyData = certPEM, otherKeyPEM },
		"no cluster":        func(t *Target) { t.Cluster = "" },
		"no address":        func(t *Target) { t.Address = nil },
		"http address":      func(t *Target) { a := *t.Address; a.Scheme = "http"; t.Address = &a },
		"tunnel and proxy":  func(t *Target) { t.Tunnel = &countingDialer{}; t.TunnelID = "x"; t.ProxyURL = u.url },
		"tunnel without ID": func(t *Target) { t.Tunnel = &countingDialer{} },
		"ftp proxy":         func(t *Target) { pu := *u.url; pu.Scheme = "ftp"; t.ProxyURL = &pu },
	} {
		t.Run(name, func(t *testing.T) {
			tg := u.target(t, "bad", "client")
			mutate(tg)
			l, err := p.Acquire(tg)
			if err == nil {
				l.Release()
				t.Fatal("Acquire succeeded")
			}
			if !errors.Is(err, ErrInvalidTarget) {
				t.Errorf("error %v is not ErrInvalidTarget", err)
			}
		})
	}
	if st := p.Stats(); st.Created != 0 || st.Live != 0 {
		t.Errorf("invalid targets created entries: %+v", st)
	}
	if _, err := p.Acquire(nil); !errors.Is(err, ErrInvalidTarget) {
		t.Errorf("Acquire(nil): %v", err)
	}
}

// Close does not wait out the grace period: the server in front has drained
// by then, and what is still live (upgraded streams) must not hold shutdown.
func TestCloseCutsRetiringStreams(t *testing.T) {
	u := newUpstream(t)
	p := mustNew(t, Config{Capacity: 8, RetireGrace: time.Hour})
	l := acquire(t, p, u.target(t, "c1", "client-1"))
	w := startStream(t, l.Transport(), u)
	p.Remove("c1", ReasonDeleted) // retiring, with a live stream and an hour of grace

	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close waited for the retire grace period of a live stream")
	}
	<-w.done
	if st := p.Stats(); st.OpenConns != 0 || st.Retiring != 0 {
		t.Fatalf("after Close: %+v, want no open connections and nothing retiring", st)
	}
	l.Release()
}

// Created is true only for the Acquire that built the entry: the proxy's
// re-check for a gateway deleted during Acquire relies on it.
func TestLeaseCreated(t *testing.T) {
	u := newUpstream(t)
	p := newTestPool(t, Config{Capacity: 8, RetireGrace: time.Minute})
	tg := u.target(t, "c1", "client-1")
	created := func() bool {
		l := acquire(t, p, tg)
		defer l.Release()
		return l.Created()
	}
	if !created() {
		t.Fatal("the first Acquire built the entry, but Created() is false")
	}
	if created() {
		t.Fatal("the second Acquire found the entry pooled, but Created() is true")
	}
	p.Remove("c1", ReasonDeleted)
	if !created() {
		t.Fatal("the Acquire after Remove built a new entry, but Created() is false")
	}
	rotated := u.target(t, "c1", "client-2")
	l := acquire(t, p, rotated)
	defer l.Release()
	if !l.Created() {
		t.Fatal("an Acquire with new credentials built a new entry, but Created() is false")
	}
}

// Acquire's lease on a new entry says Created, a second on the pooled
// entry does not, a lease released twice is released once, and the steady
// path allocates only the Lease itself (AcquireInto, which leased into a
// caller's Lease to save that one allocation, was cut: see Acquire).
func TestAcquireLease(t *testing.T) {
	u := newUpstream(t)
	p := newTestPool(t, Config{Capacity: 8})
	tg := u.target(t, "c1", "client-1")
	l, err := p.Acquire(tg)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Created() || l.Transport() == nil {
		t.Fatalf("the first Acquire: Created() = %v, transport %v; want a new entry's", l.Created(), l.Transport())
	}
	l2, err := p.Acquire(tg)
	if err != nil {
		t.Fatalf("a second Acquire: %v", err)
	}
	if l2.Created() {
		t.Fatal("a lease on the pooled entry says Created()")
	}
	if n := p.Stats().ActiveStreams; n != 2 {
		t.Fatalf("%d active leases after two Acquires, want 2", n)
	}
	l.Release()
	l.Release() // released once
	l2.Release()
	if n := p.Stats().ActiveStreams; n != 0 {
		t.Fatalf("%d active leases after the releases, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		l, err := p.Acquire(tg)
		if err != nil {
			t.Fatal(err)
		}
		l.Release()
	}); n > 1 {
		t.Fatalf("Acquire and Release of a pooled entry allocate %v times, want at most 1 (the Lease)", n)
	}
}

// RenewTunnelled (a konnectivity proxy-server missed a health check) gives
// the next requests of tunnelled entries new connections: an idle one is
// closed, one carrying a stream keeps its stream but takes no new request
// and closes once the stream ends; a direct entry's connection is kept.
func TestRenewTunnelled(t *testing.T) {
	u := newUpstream(t)
	p := newTestPool(t, Config{Capacity: 8})
	tunnelled := func(name string) *Target {
		tg := u.target(t, name, "client")
		tg.Tunnel, tg.TunnelID = &countingDialer{}, "tunnel-1"
		return tg
	}
	open := func(l *Lease) int {
		l.e.mu.Lock()
		defer l.e.mu.Unlock()
		return len(l.e.conns)
	}
	direct := acquire(t, p, u.target(t, "direct", "client"))
	defer direct.Release()
	mustGet(t, direct.Transport(), u.url, "/hello")
	idle := acquire(t, p, tunnelled("idle"))
	defer idle.Release()
	mustGet(t, idle.Transport(), u.url, "/hello")
	streaming := acquire(t, p, tunnelled("streaming"))
	defer streaming.Release()
	s := startStream(t, streaming.Transport(), u)
	defer s.stop()

	p.RenewTunnelled()
	eventually(t, "the idle tunnelled connection to close", func() bool { return open(idle) == 0 })
	lines := s.lines.Load()
	eventually(t, "the tunnelled watch to go on", func() bool { return s.lines.Load() > lines+2 })
	if s.ended() || open(streaming) != 1 {
		t.Fatalf("a tunnelled connection with a stream was cut (watch ended: %v, its connections %d)", s.ended(), open(streaming))
	}
	if n := open(direct); n != 1 {
		t.Fatalf("the direct entry has %d connections after RenewTunnelled; want its 1", n)
	}
	// New requests take new connections; the watch's ends with the watch.
	mustGet(t, idle.Transport(), u.url, "/hello")
	if n := open(idle); n != 1 {
		t.Fatalf("after a new request the idle tunnelled entry has %d connections; want 1 (a new one)", n)
	}
	mustGet(t, streaming.Transport(), u.url, "/hello")
	if n := open(streaming); n != 2 {
		t.Fatalf("after a new request the streaming tunnelled entry has %d connections; want 2 (the watch's and a new one)", n)
	}
	s.stop()
	eventually(t, "the watch's connection to close once its stream ended", func() bool { return open(streaming) == 1 })
}
