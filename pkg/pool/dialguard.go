package pool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// ErrConnectionsUnusable is wrapped by the errors of a dial the pool refuses
// because the cluster does not keep the connections it was given: it closes
// them, sends GOAWAY at once, or allows no (or too few) streams on them.
var ErrConnectionsUnusable = errors.New("the cluster does not take requests on the connections the gateway opens")

// Why a dial was refused, the values of the reason label of
// cluster_gateway_pool_dials_refused_total.
const (
	RefusedPaced  = "paced"  // too many dials in a short time
	RefusedCapped = "capped" // MaxConnsPerCluster HTTP/2 connections open
)

// refusedDial is a dial the guard refused, and why.
type refusedDial struct {
	reason string
	detail string
}

func (r *refusedDial) Error() string { return ErrConnectionsUnusable.Error() + ": " + r.detail }
func (r *refusedDial) Unwrap() error { return ErrConnectionsUnusable }

// Dials of one entry's ordinary transport while its cluster speaks HTTP/2:
// at most redialBurst at once, then redialRate a second; a dial waits up to
// redialWait for its turn and is refused after that. A cluster that keeps
// its connections needs one, and one more now and then (a GOAWAY when it
// restarts, more requests in flight than its streams per connection).
const (
	redialBurst = 16
	redialRate  = 4 // a second
	redialWait  = time.Second
)

// dialGuard bounds the connections an entry's ordinary transport dials.
//
// When no open HTTP/2 connection takes a request, net/http and x/net/http2
// dial a new one at once, and again, in a loop until the request's context
// ends: a cluster that answers every new connection with GOAWAY, or closes
// it, made the gateway dial it hundreds of times a second per request in
// flight, a TLS handshake each; one that advertises
// SETTINGS_MAX_CONCURRENT_STREAMS of 0 also had every such connection kept
// open (each still answers pings): thousands a minute, until the gateway ran
// out of file descriptors for every cluster. So the guard paces the dials
// of a cluster that speaks HTTP/2 and caps its open HTTP/2 connections.
// HTTP/1.1 needs neither: net/http does not dial again for a request whose
// new connection failed, and keeps at most maxIdleConnsPerHost idle ones,
// so its connections follow the requests in flight, which the gateway's
// per-cluster limits bound.
type dialGuard struct {
	max   int           // open HTTP/2 connections; 0: no cap
	rate  *rate.Limiter // dials while the cluster speaks HTTP/2
	burst int           // rate's, as configured
	// http1 is whether the last handshake chose HTTP/1.1: its dials are not
	// paced (a cluster that starts to speak HTTP/2 is paced again).
	http1 atomic.Bool

	mu sync.Mutex
	h2 int // open HTTP/2 connections
}

func newDialGuard(max int) *dialGuard {
	return &dialGuard{max: max, rate: rate.NewLimiter(redialRate, redialBurst), burst: redialBurst}
}

// probeDials is how many dials a transient probe entry may make: its one
// request needs one, or two when the first connection is lost at once.
const probeDials = 2

// forProbe makes g a probe's: probeDials in all.
func (g *dialGuard) forProbe() {
	g.rate.SetLimit(0)
	g.rate.SetBurst(probeDials)
	g.burst = probeDials
}

// pace waits for a dial's turn, up to redialWait, or says why it gets none.
func (g *dialGuard) pace(ctx context.Context) error {
	if g.http1.Load() {
		return nil
	}
	if err := g.full(); err != nil {
		return err // dialing would only make a connection to close
	}
	r := g.rate.Reserve()
	d := r.Delay()
	if d == 0 {
		return nil
	}
	if d > redialWait {
		r.Cancel()
		return &refusedDial{RefusedPaced, fmt.Sprintf("it ends or refuses them (GOAWAY, a close, or no streams allowed) as soon as they are open, and the gateway has stopped dialing it for now (at most %d dials at once, then %v a second)", g.burst, float64(g.rate.Limit()))}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		r.Cancel()
		return context.Cause(ctx)
	}
}

// handshaken records the protocol a new connection chose; an HTTP/2 one
// takes a place, released when it closes, or is refused at the cap.
func (g *dialGuard) handshaken(h2 bool) error {
	g.http1.Store(!h2)
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
		return &refusedDial{RefusedCapped, fmt.Sprintf("%d HTTP/2 connections to it are open and none takes another request (--pool-max-connections-per-cluster): it allows too few concurrent streams (SETTINGS_MAX_CONCURRENT_STREAMS) for the requests in flight, or refuses them", g.h2)}
	}
	return nil
}

func (g *dialGuard) release() {
	g.mu.Lock()
	g.h2--
	g.mu.Unlock()
}
