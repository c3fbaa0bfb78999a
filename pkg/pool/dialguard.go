package pool

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"golang.org/x/net/http2"
)

// ErrConnectionsUnusable is wrapped by the errors of a dial the pool refuses
// because the cluster does not keep the connections it was given: it closes
// them, sends GOAWAY at once, or allows no (or too few) streams on them.
var ErrConnectionsUnusable = errors.New("the cluster does not take requests on the connections the gateway opens")

// Why a dial was refused, the values of the reason label of
// cluster_gateway_pool_dials_refused_total.
const (
	RefusedRedials = "redials" // one request had the cluster dialed maxDialsPerRequest times
	RefusedCapped  = "capped"  // MaxConnsPerCluster HTTP/2 connections open
)

// refusedDial is a dial the guard refused, and why.
type refusedDial struct {
	reason string
	detail string
}

func (r *refusedDial) Error() string { return ErrConnectionsUnusable.Error() + ": " + r.detail }
func (r *refusedDial) Unwrap() error { return ErrConnectionsUnusable }

// maxDialsPerRequest is how many dials of an entry's ordinary transport one
// request may cause. net/http dials one for a request that finds the open
// connections full, and x/net another when that one is gone before the
// request is written (a GOAWAY as the cluster restarts, a surplus
// connection it closes because an older one has room again).
const maxDialsPerRequest = 4

// maxSurplusPerRequest is how many of one request's dials may be given
// back because x/net closed the connection unused (offerH2). A healthy
// burst under CPU load made a request dial five; a cluster that has a
// connection show room and then take it back (its stream limit toggled)
// could have it happen without end, so it is bounded too, well above that.
const maxSurplusPerRequest = 16

// requestDials counts the dials one request causes. A lease's transport
// gives each request it sends its own (countedDials); dials for a request
// without one are not counted.
type requestDials struct {
	n       atomic.Int32 // dials counted against maxDialsPerRequest
	surplus atomic.Int32 // connections x/net closed unused (giveBack)

	mu sync.Mutex
	// givenBack says, for each dial given back, what the give-back
	// depends on.
	givenBack []givenBack
}

// givenBack is why x/net closed one of a request's new connections unused:
// cc of h had room, or (cc nil) a connection to the cluster that h had not
// handed out yet had room, or was being added at that moment. The dial
// stays given back while cc lives or, without cc, while no connection of h
// ended since the offer (h.ended was ended then).
type givenBack struct {
	h     *h2health
	cc    *http2.ClientConn
	ended uint64
}

// giveBack uncounts a dial whose connection x/net closed unused: the
// cluster did nothing wrong, as long as what it depends on (givenBack)
// holds.
func (d *requestDials) giveBack(g givenBack) {
	if d.surplus.Add(1) > maxSurplusPerRequest {
		return
	}
	d.mu.Lock()
	d.givenBack = append(d.givenBack, g)
	d.mu.Unlock()
	d.n.Add(-1)
}

// count is the request's dials that count: those not given back, and those
// given back for connections the cluster ended since (a GOAWAY, a close):
// a cluster that sends GOAWAY on every connection has each show room
// until it does, and requests race to replace it.
func (d *requestDials) count() int32 {
	n := d.n.Load()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, g := range d.givenBack {
		switch {
		case g.h == nil:
		case g.cc != nil && !g.h.alive(g.cc):
			n++
		case g.cc == nil && g.h.ended.Load() != g.ended:
			n++
		}
	}
	return n
}

type requestDialsKey struct{}

// dialsContext is a request's context carrying its count of dials: one
// allocation for both.
type dialsContext struct {
	context.Context
	dials requestDials
}

func (c *dialsContext) Value(key any) any {
	if key == (requestDialsKey{}) {
		return &c.dials
	}
	return c.Context.Value(key)
}

// withRequestDials is ctx carrying a new count of dials.
func withRequestDials(ctx context.Context) context.Context {
	return &dialsContext{Context: ctx}
}

// countedDials is an entry's ordinary transport as leases and probes get
// it: each request it sends counts the dials it causes, against
// maxDialsPerRequest, unless its context counts them already.
type countedDials struct{ rt http.RoundTripper }

func (c countedDials) RoundTrip(req *http.Request) (*http.Response, error) {
	if _, ok := req.Context().Value(requestDialsKey{}).(*requestDials); !ok {
		req = req.WithContext(withRequestDials(req.Context()))
	}
	return c.rt.RoundTrip(req)
}

// dialGuard bounds the connections an entry's ordinary transport dials.
//
// When no open HTTP/2 connection takes a request, net/http and x/net/http2
// dial a new one at once, and again, in a loop until the request's context
// ends: a cluster that answers every new connection with GOAWAY, or closes
// it, made the gateway dial it hundreds of times a second per request in
// flight, a TLS handshake each; one that advertises
// SETTINGS_MAX_CONCURRENT_STREAMS of 0 also had every such connection kept
// open (each still answers pings): thousands a minute, until the gateway ran
// out of file descriptors for every cluster. So one request may cause at
// most maxDialsPerRequest dials, and an entry keeps at most max HTTP/2
// connections open, where those a cluster allows no streams on would pile
// up from request to request. A healthy cluster needs one for every few
// hundred requests in flight; net/http opens one for each request that
// finds the open ones full (a cold start with more requests than a
// connection's first streams, a burst of watches: 74 for 200 requests in
// pkg/proxy's TestRequestTimeoutIsAlways504), so the cap is set well above
// that. HTTP/1.1 needs no cap: net/http keeps at most maxIdleConnsPerHost
// idle connections, so its connections follow the requests in flight,
// which the per-cluster limits bound.
type dialGuard struct {
	max int // open HTTP/2 connections; 0: no cap

	mu sync.Mutex
	h2 int // open HTTP/2 connections
}

func newDialGuard(max int) *dialGuard { return &dialGuard{max: max} }

// admit counts a dial against the request of ctx, and refuses it when that
// request had too many, or when no new connection could be kept.
func (g *dialGuard) admit(ctx context.Context) error {
	if d, ok := ctx.Value(requestDialsKey{}).(*requestDials); ok {
		if d.n.Add(1); d.count() > maxDialsPerRequest {
			return &refusedDial{RefusedRedials, fmt.Sprintf("it ended or refused the last %d connections this request had the gateway open (GOAWAY, a close, or no streams allowed)", maxDialsPerRequest)}
		}
	}
	return g.full() // dialing would only make a connection to close
}

// handshaken records the protocol a new connection chose; an HTTP/2 one
// takes a place, released when it closes, or is refused at the cap.
func (g *dialGuard) handshaken(h2 bool) error {
	if !h2 {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.fullLocked(); err != nil {
		return err
	}
	g.h2++
	return nil
}

func (g *dialGuard) full() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fullLocked()
}

func (g *dialGuard) fullLocked() error {
	if g.max > 0 && g.h2 >= g.max {
		return &refusedDial{RefusedCapped, fmt.Sprintf("%d HTTP/2 connections to it are open (--pool-max-connections-per-cluster) and none takes another request: it allows too few concurrent streams (SETTINGS_MAX_CONCURRENT_STREAMS) for the requests in flight, or refuses them", g.h2)}
	}
	return nil
}

// release gives back the place of an HTTP/2 connection that closed.
func (g *dialGuard) release() {
	g.mu.Lock()
	g.h2--
	g.mu.Unlock()
}
