package pool

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"

	"github.com/clustergateway/cluster-gateway/pkg/tracing"
)

// errRetired is returned by dials on an entry whose connections were closed:
// a caller that kept a lease past the grace period must acquire a new one.
var errRetired = errors.New("cluster transport was retired; acquire a new lease from the pool")

// entry is one cluster's transports plus the connections they dialed.
type entry struct {
	pool    *Pool
	cluster string
	fp      string
	shape   shape // the Target it was built from, for Acquire's fast path
	// addrs are the only addresses this entry dials, the primary first;
	// each has its own connections, cold start and cap (address).
	addrs []*address
	next  atomic.Uint32 // the spreading's turn (pick)

	tls *entryTLS       // what its TLS connections are made of
	rt  *http.Transport // HTTP/2-capable, for ordinary requests
	h2  *h2health       // rt's HTTP/2 connections and their health checks
	// upgrade is the HTTP/1.1-only transport for exec/attach/port-forward,
	// built on the first such request: most entries never carry one.
	upgrade   atomic.Pointer[http.Transport]
	upgradeMu sync.Mutex // builds it once

	rawDial   dialFunc // direct, tunnel or proxy; wrapped by dialContext
	tunnelled bool     // rawDial goes through a tunnel (Target.Tunnel)
	route     string   // rawDial's route, for the dial span: tracing.Route*
	// traced is the leases' transport with a client span per round trip,
	// when the pool traces (Config.Tracer); nil otherwise.
	traced http.RoundTripper

	lastUsed atomic.Int64 // by users; pool clock, see Pool.now
	// lastActive is when a request or a health probe last ended on the
	// entry's connections: a connection a probe uses is not idle.
	lastActive atomic.Int64

	// transient entries are built by Probe for one health probe and closed
	// right after it: they are never in the LRU and stay out of the pool's
	// counters, which describe the traffic users send.
	transient bool

	mu       sync.Mutex
	active   int  // leases not yet released
	retiring bool // out of the LRU; drained closes when active hits 0
	drained  chan struct{}
	dead     bool // connections closed; no new dials
	conns    map[*trackedConn]struct{}
}

// newEntry builds transports without dialing, so it is cheap and can run
// outside the pool lock. It starts no goroutines: a built entry that loses a
// race is simply dropped.
func (p *Pool) newEntry(t *Target, fp string) (*entry, error) {
	shape := shapeOf(t)
	tlsm, err := tlsFor(&shape)
	if err != nil {
		return nil, err
	}
	raw, err := p.rawDialerFor(t)
	if err != nil {
		return nil, err
	}
	e := &entry{
		pool:      p,
		cluster:   t.Cluster,
		fp:        fp,
		shape:     shape,
		tls:       tlsm,
		rawDial:   raw,
		tunnelled: t.Tunnel != nil,
		route:     routeOf(t),
		drained:   make(chan struct{}),
		conns:     make(map[*trackedConn]struct{}),
	}
	for i, u := range t.addresses() {
		e.addrs = append(e.addrs, newAddress(e, i, u))
	}
	e.rt, e.h2, err = newTransport(e.dialTLS, p.opts)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %w", t.Cluster, err)
	}
	if tr := p.opts.Tracer; tr != nil {
		e.traced = tr.WrapTransport(spread{e})
	}
	if upgrade := e.rt.TLSNextProto["h2"]; upgrade != nil {
		e.rt.TLSNextProto["h2"] = func(authority string, c *tls.Conn) http.RoundTripper {
			return e.offerH2(upgrade, authority, c)
		}
	}
	e.h2.onNew = func(hostport string) {
		if a := e.addressOf(hostport); a != nil {
			a.cold.connUsable()
		}
	}
	return e, nil
}

// dialTLS is the ordinary transport's DialTLSContext: a tracked connection
// (dialContext), then the TLS handshake, offering HTTP/2. Requests waiting
// for a cold start's dial (coldStart) learn when it failed, or made an
// HTTP/1.1 connection; an HTTP/2 one lets them go once the pool hands it
// out (h2health.onNew), which is after this returns.
func (e *entry) dialTLS(ctx context.Context, network, addr string) (net.Conn, error) {
	a := e.addressOf(addr)
	if a == nil {
		return nil, e.foreign(addr)
	}
	conn, err := e.dialTLSConn(ctx, network, a)
	if err != nil {
		a.cold.dialEnded(err)
	} else if conn.(*tls.Conn).ConnectionState().NegotiatedProtocol != "h2" {
		a.cold.dialEnded(nil)
	}
	return conn, err
}

// firstRoundTrip sends req when the entry has no connection (coldStart's
// dialer). It dials the connection itself and, when the cluster speaks
// HTTP/2, hands it to rt's HTTP/2 pool as net/http would (TLSNextProto), so
// that req and the requests after it find it there. A dial by net/http would
// also leave its HTTP/1 bookkeeping for the host behind for the entry's
// life (its wait queues and idle lists, a persistConn for the HTTP/2
// connection): about 4.7 KiB per entry, a tenth of a pooled cluster's memory.
// A cluster that answers HTTP/1.1 gets net/http's dial, now (this
// connection is closed) and at its later cold starts.
//
// dialed is called once the dial is over, its HTTP/2 connection in rt's pool
// (or closed), before req is sent on it.
func (a *address) firstRoundTrip(req *http.Request, dialed func()) (*http.Response, error) {
	e := a.e
	upgrade, ok := e.rt.TLSNextProto["h2"]
	if !ok || a.http1.Load() || req.URL == nil || req.URL.Scheme != "https" {
		return e.rt.RoundTrip(req)
	}
	// As with net/http's dial, a request that ends first fails with its own
	// context's error, and the dial (bounded by --dial-timeout) goes on to
	// serve the requests after it.
	done := make(chan error, 1)
	host, addr := req.URL.Host, canonicalAddr(req.URL, "443")
	go func() { done <- a.firstConn(context.WithoutCancel(req.Context()), host, addr, upgrade) }()
	select {
	case err := <-done:
		if err != nil {
			closeBody(req)
			if req.Context().Err() != nil {
				return nil, context.Cause(req.Context()) // the likelier cause; net/http prefers it too
			}
			return nil, err
		}
		dialed()
	case <-req.Context().Done():
		closeBody(req)
		return nil, context.Cause(req.Context())
	}
	return e.rt.RoundTrip(req)
}

// firstConn dials addr; an HTTP/2 connection joins rt's pool through
// upgrade (x/net's: under the key that requests to host look up, or closed
// when the pool has a usable one already), an HTTP/1.1 one is closed and
// marks the entry http1.
func (a *address) firstConn(ctx context.Context, host, addr string, upgrade func(string, *tls.Conn) http.RoundTripper) error {
	conn, err := a.e.dialTLS(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	tc := conn.(*tls.Conn)
	if tc.ConnectionState().NegotiatedProtocol != "h2" {
		a.http1.Store(true)
		_ = tc.Close()
		return nil
	}
	// A failure (the connection could not start HTTP/2) leaves the request
	// to net/http's dial.
	_ = upgrade(host, tc)
	return nil
}

// offerH2 hands a new HTTP/2 connection to x/net's pool through upgrade
// (x/net's TLSNextProto, which both net/http's dials and firstConn call).
// x/net keeps it unless another connection to its address can take a
// request by then, or another is being added at that moment
// (addConnIfNeeded): then it closes this one unused, and the request that
// had it dialed, finding that room gone when it asks for a stream, has
// net/http dial again. In a healthy burst under CPU load that repeated
// until the dial guard refused a request (TestBurstBeyondTheStreamsIsNotRefused
// in CI: 90 of 300 requests refused; the room was on a connection not yet
// handed out, or being added, which h2health cannot see). So such a
// connection's dial is given back to its request, bounded by
// maxSurplusPerRequest, and counts again if the connection it made way for
// ends (givenBack): a cluster that ends every connection has requests race
// to replace the one it ended. One that x/net used still counts, whatever
// the cluster does with it (GOAWAY, a close), and so does one whose
// addition failed (upgrade's erring round tripper).
//
// x/net decides before upgrade returns: a connection it uses has had the
// HTTP/2 preface written (NewClientConn, synchronously); one it does not
// use is closed in a goroutine, which begins with crypto/tls's write
// deadline for its close_notify, or has not begun yet.
func (e *entry) offerH2(upgrade func(string, *tls.Conn) http.RoundTripper, authority string, c *tls.Conn) http.RoundTripper {
	tc, ok := c.NetConn().(*trackedConn)
	if !ok || tc.dials == nil {
		return upgrade(authority, c)
	}
	tc.offer.Store(offerPending)
	if testHookOffer != nil {
		testHookOffer(tc)
	}
	g := givenBack{h: e.h2, cc: e.h2.roomy(), ended: e.h2.ended.Load()}
	rt := upgrade(authority, c)
	d := tc.dials
	tc.dials = nil // it holds the request's context (dialsContext): not for the connection's life
	_, failed := rt.(interface{ RoundTripErr() error })
	if seen := tc.offer.Swap(offerNone); seen != offerWritten && !failed {
		if g.cc == nil {
			g.cc = e.h2.roomy()
		}
		d.giveBack(g)
	}
	return rt
}

// testHookOffer, set by tests only, runs when a new HTTP/2 connection is
// about to be handed to x/net's pool: the window in which another
// connection can gain room.
var testHookOffer func(*trackedConn)

// dialTLSConn dials a and verifies it against the configured server name
// or, without one, a's own host: never against another address's name.
func (e *entry) dialTLSConn(ctx context.Context, network string, a *address) (net.Conn, error) {
	if err := a.dials.admit(ctx); err != nil {
		return nil, e.refused(err)
	}
	c, err := e.dialContext(ctx, network, a.hostport)
	if err != nil {
		return nil, err
	}
	c.(*trackedConn).dials, _ = ctx.Value(requestDialsKey{}).(*requestDials)
	tc, err := e.tls.handshake(ctx, c, a.hostport, e.pool.opts.DialTimeout, "h2", "http/1.1")
	if err != nil {
		if ctx.Err() == nil {
			a.failed()
		}
		return nil, &addressDialError{fmt.Errorf("cluster %q: %w", e.cluster, err)}
	}
	h2 := tc.ConnectionState().NegotiatedProtocol == "h2"
	if err := a.dials.handshaken(h2); err != nil {
		_ = tc.Close()
		return nil, e.refused(err)
	}
	var guard *dialGuard
	if h2 {
		guard = a.dials
	} else {
		c.(*trackedConn).dials = nil // never offered to x/net (offerH2)
	}
	a.succeeded()
	e.markReady(c.(*trackedConn), guard)
	return tc, nil
}

// refused counts a dial the guard refused and names the cluster in err.
func (e *entry) refused(err error) error {
	var r *refusedDial
	if errors.As(err, &r) {
		e.note(func() { e.pool.noteDialRefused(r.reason) })
	}
	return fmt.Errorf("cluster %q: %w", e.cluster, err)
}

// markReady counts a handshaken connection of rt, unless it was closed
// meanwhile; untrack uncounts it. An HTTP/2 one holds its place in guard
// until then.
func (e *entry) markReady(c *trackedConn, guard *dialGuard) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, open := e.conns[c]; !open {
		if guard != nil {
			guard.release()
		}
		return
	}
	if !c.ready {
		c.ready = true
		c.guard = guard
		c.a.ready.Add(1)
	}
}

// upgradeTransport is the entry's HTTP/1.1 transport, built on first use.
func (e *entry) upgradeTransport() *http.Transport {
	if u := e.upgrade.Load(); u != nil {
		return u
	}
	e.upgradeMu.Lock()
	defer e.upgradeMu.Unlock()
	if u := e.upgrade.Load(); u != nil {
		return u
	}
	u := newUpgradeTransport(e.tls.config("http/1.1"), e.dialContext, e.pool.opts)
	e.upgrade.Store(u)
	return u
}

// dialContext is the DialContext of both transports: it bounds the dial,
// counts it and tracks the connection.
func (e *entry) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	a := e.addressOf(addr)
	if a == nil {
		return nil, e.foreign(addr)
	}
	if e.isDead() {
		return nil, fmt.Errorf("cluster %q: %w", e.cluster, errRetired)
	}
	dctx, cancel := context.WithTimeout(ctx, e.pool.opts.DialTimeout)
	defer cancel()
	e.note(e.pool.noteDial)
	var span trace.Span
	if tr := e.pool.opts.Tracer; tr != nil {
		dctx, span = tr.Start(dctx, "cluster-gateway.dial", trace.SpanKindInternal,
			tracing.Cluster.String(e.cluster), tracing.Route.String(e.route), tracing.Address.String(a.hostport))
	}
	c, err := e.rawDial(dctx, network, a.hostport)
	if span != nil {
		tracing.End(span, err, "dial failed")
	}
	if err != nil {
		e.note(e.pool.noteDialFailure)
		if ctx.Err() == nil {
			a.failed() // not the caller's cancellation: the address's failure
		}
		return nil, &addressDialError{fmt.Errorf("cluster %q: dial %s: %w", e.cluster, addr, err)}
	}
	return e.track(c, a)
}

// foreign refuses a dial to an address that is not the entry's: its client
// certificate and CA belong to its own endpoint's addresses.
func (e *entry) foreign(addr string) error {
	names := make([]string, len(e.addrs))
	for i, a := range e.addrs {
		names[i] = a.hostport
	}
	return fmt.Errorf("cluster %q transport only dials %s, not %s; build request URLs from the ClusterGateway endpoint", e.cluster, strings.Join(names, ", "), addr)
}

// note counts an event of a pooled entry; a transient one is not counted.
func (e *entry) note(f func()) {
	if !e.transient {
		f()
	}
}

func (e *entry) isDead() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dead
}

func (e *entry) track(c net.Conn, a *address) (net.Conn, error) {
	tc := &trackedConn{Conn: c, e: e, a: a}
	e.mu.Lock()
	if e.dead {
		// Retired while this dial was in flight.
		e.mu.Unlock()
		_ = c.Close()
		return nil, fmt.Errorf("cluster %q: %w", e.cluster, errRetired)
	}
	e.conns[tc] = struct{}{}
	e.mu.Unlock()
	e.note(e.pool.noteConnOpened)
	return tc, nil
}

func (e *entry) untrack(c *trackedConn) {
	e.mu.Lock()
	_, ok := e.conns[c]
	delete(e.conns, c)
	if ok && c.ready {
		c.a.ready.Add(-1)
		if c.guard != nil {
			c.guard.release()
		}
	}
	e.mu.Unlock()
	if ok {
		e.note(e.pool.noteConnClosed)
	}
}

// lease counts a new user, held by l; the caller holds the pool lock, so a
// retiring entry (already out of the LRU) can never gain one.
func (e *entry) lease(l *Lease, now int64) {
	e.mu.Lock()
	e.active++
	e.mu.Unlock()
	e.lastUsed.Store(now)
	e.lastActive.Store(now)
	e.pool.noteStreamStarted()
	l.e, l.created = e, false
	l.released.Store(false)
}

func (e *entry) release(now int64) {
	e.releaseQuiet()
	e.lastUsed.Store(now)
	e.pool.noteStreamEnded()
}

func (e *entry) idle() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.active == 0
}

// markRetiring returns a channel closed once no lease is active.
func (e *entry) markRetiring() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.retiring = true
	if e.active == 0 {
		close(e.drained)
	}
	return e.drained
}

// closeIdle closes the connections that carry no request: the HTTP/1.1
// connections idle in either transport's pool and the HTTP/2 connections
// without a stream. Each is checked and closed under its own pool's or
// connection's lock, so a request that got a connection keeps it.
func (e *entry) closeIdle() {
	e.rt.CloseIdleConnections()
	e.h2.closeIdle()
	if u := e.upgrade.Load(); u != nil {
		u.CloseIdleConnections()
	}
}

// hasConns reports whether any connection of the entry is open.
func (e *entry) hasConns() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.conns) > 0
}

// closeAll cuts every connection, including live streams, and stops new
// dials. Closing the raw conns makes the transports' read loops exit. The
// health checks stop first: afterwards no timer holds any part of the entry.
func (e *entry) closeAll() {
	e.h2.stop()
	e.mu.Lock()
	e.dead = true
	conns := make([]*trackedConn, 0, len(e.conns))
	for c := range e.conns {
		conns = append(conns, c)
	}
	e.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	e.closeIdle()
}

// routeOf names how an entry of t reaches its cluster (the dial span's route).
func routeOf(t *Target) string {
	switch {
	case t.Tunnel != nil:
		return tracing.RouteKonnectivity
	case t.ProxyURL != nil:
		return tracing.RouteProxy
	}
	return tracing.RouteDirect
}
