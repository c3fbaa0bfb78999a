package pool

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"golang.org/x/net/http2"
)

// h2health is the connection pool of an entry's HTTP/2 transport: x/net's
// own (the one http.Transport hands every h2 connection to), wrapped so that
// the entry runs each connection's health check and can stop it.
//
// x/net/http2 has a health check of its own (Transport.ReadIdleTimeout),
// but its read loop re-arms the check's timer on its last, failing read and
// nothing stops it (golang/go#80920, as of x/net v0.62 and Go 1.26's bundled
// copy): every closed connection, its TLS buffers and, through its transport,
// the whole retired pool entry stay reachable for ReadIdleTimeout after the
// close. Under a scan of more clusters than the pool holds that is memory
// in proportion to the clusters touched in the last ReadIdleTimeout, not to
// the pool. So x/net's check is off and this one runs instead: one timer per
// connection, stopped when the entry's connections are closed.
//
// It pings each connection every ReadIdleTimeout (x/net pings one only after
// ReadIdleTimeout without a frame; a busy connection here gets one extra
// PING frame per period) and closes it when the ping is not answered within
// PingTimeout: a dead connection is found within ReadIdleTimeout+PingTimeout,
// the bound x/net gives. Nothing here takes the connection's write lock
// outside the ping itself (ClientConn.State would), so a write blocked on a
// dead peer cannot block the check, as it cannot block x/net's.
type h2health struct {
	http2.ClientConnPool // x/net's, from http2.ConfigureTransports

	every, pingTimeout time.Duration

	// last is the connection most recently handed out: a request on it
	// needs no lock (nearly every request, since HTTP/2 multiplexes).
	last atomic.Pointer[http2.ClientConn]

	mu      sync.Mutex
	checks  map[*http2.ClientConn]*time.Timer
	stopped bool
	// dead are the checked connections x/net marked dead (a GOAWAY, a
	// close), until their check forgets them; nil while there are none.
	dead map[*http2.ClientConn]struct{}

	answered atomic.Int64 // pings answered in time, for tests

	// ended counts MarkDead calls: connections x/net found closed or sent
	// GOAWAY. A dial given back without a connection to depend on
	// (givenBack) holds while it does not move.
	ended atomic.Uint64

	// onNew is told when a connection to addr (host:port) is handed out
	// for the first time: from then on it serves requests through the pool
	// (coldStart).
	onNew func(addr string)
}

func newH2Health(inner http2.ClientConnPool, every, pingTimeout time.Duration) *h2health {
	return &h2health{ClientConnPool: inner, every: every, pingTimeout: pingTimeout, checks: make(map[*http2.ClientConn]*time.Timer)}
}

// GetClientConn is x/net's; a connection handed out for the first time gets
// its health check. Every connection that carries a request passes here.
func (h *h2health) GetClientConn(req *http.Request, addr string) (*http2.ClientConn, error) {
	if testHookGetClientConn != nil {
		testHookGetClientConn(req)
	}
	cc, err := h.ClientConnPool.GetClientConn(req, addr)
	if err == nil && h.last.Load() != cc && h.watch(cc) && h.onNew != nil {
		h.onNew(addr)
	}
	return cc, err
}

// testHookGetClientConn, set by tests only, runs when a request asks the
// pool for a connection, before x/net looks.
var testHookGetClientConn func(*http.Request)

// watch starts cc's health check, and says whether cc is new.
func (h *h2health) watch(cc *http2.ClientConn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		// The entry's connections are being closed; so is this one.
		return false
	}
	h.last.Store(cc)
	if _, ok := h.checks[cc]; ok {
		return false
	}
	h.checks[cc] = time.AfterFunc(h.every, checkLater(weak.Make(h), weak.Make(cc)))
	return true
}

// checkLater is a check's timer function. A live connection keeps both
// alive (its read loop holds it, it holds its transport, which holds h);
// once the connection is closed the function does nothing, and as long as
// the runtime keeps the stopped timer it keeps nothing of the entry.
func checkLater(h weak.Pointer[h2health], cc weak.Pointer[http2.ClientConn]) func() {
	return func() {
		if h, cc := h.Value(), cc.Value(); h != nil && cc != nil {
			h.check(cc)
		}
	}
}

// MarkDead is x/net's: the connection is closed, or it got a GOAWAY and
// serves only its running streams. Either way it is checked now rather than
// a period later: a closed one fails the ping at once and is forgotten, a
// draining one answers and stays checked while its streams run. It must not
// block: x/net calls it from the read loop before closing the connection.
func (h *h2health) MarkDead(cc *http2.ClientConn) {
	h.ClientConnPool.MarkDead(cc)
	h.ended.Add(1)
	h.last.CompareAndSwap(cc, nil)
	h.mu.Lock()
	if t, ok := h.checks[cc]; ok {
		t.Reset(0)
		if h.dead == nil {
			h.dead = make(map[*http2.ClientConn]struct{})
		}
		h.dead[cc] = struct{}{}
	}
	h.mu.Unlock()
}

// check runs on the connection's timer, like x/net's healthCheck.
func (h *h2health) check(cc *http2.ClientConn) {
	ctx, cancel := context.WithTimeout(context.Background(), h.pingTimeout)
	err := cc.Ping(ctx)
	cancel()
	if err == nil {
		h.answered.Add(1)
	}
	h.mu.Lock()
	t, ok := h.checks[cc]
	if ok && err == nil {
		t.Reset(h.every)
	} else if ok {
		h.forgetLocked(cc)
	}
	h.mu.Unlock()
	if err != nil {
		// Lost (or already closed): x/net closes it the same way, failing
		// its streams; its read loop then calls MarkDead.
		h.last.CompareAndSwap(cc, nil)
		_ = cc.Close()
	}
}

// closeIdle closes the connections that carry no stream and keeps the
// others. It is what http2.Transport.CloseIdleConnections does, which cannot
// reach x/net's pool through this wrapper (the pool's idle closer is
// unexported), so a Transport shell over that pool asks it: each connection
// is closed under its own lock only if it has no stream and no stream
// reserved, so a request never loses a connection it was given.
func (h *h2health) closeIdle() {
	(&http2.Transport{ConnPool: h.ClientConnPool}).CloseIdleConnections()
}

// renew has new requests take new connections: each connection is marked
// not to be reused (x/net closes it once its last stream ends) and the idle
// ones are closed now. Running streams go on where they are.
func (h *h2health) renew() {
	h.mu.Lock()
	ccs := make([]*http2.ClientConn, 0, len(h.checks))
	for cc := range h.checks {
		ccs = append(ccs, cc)
	}
	h.mu.Unlock()
	for _, cc := range ccs {
		cc.SetDoNotReuse()
	}
	h.closeIdle()
}

// stop ends every health check, for good: the entry is closing all of its
// connections, and nothing of them may stay reachable from a timer.
func (h *h2health) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = true
	for cc, t := range h.checks {
		t.Stop()
		h.forgetLocked(cc)
	}
	h.last.Store(nil)
}

func (h *h2health) forgetLocked(cc *http2.ClientConn) {
	delete(h.checks, cc)
	if delete(h.dead, cc); len(h.dead) == 0 {
		h.dead = nil
	}
}

// roomy is a connection it handed out that can take another request now,
// or nil: with one, x/net closes a new connection to the cluster unused
// (offerH2). Those to the entry's other addresses count too: it is a
// hint, and what it gives back is bounded (maxSurplusPerRequest).
func (h *h2health) roomy() *http2.ClientConn {
	h.mu.Lock()
	defer h.mu.Unlock()
	for cc := range h.checks {
		if cc.CanTakeNewRequest() {
			return cc
		}
	}
	return nil
}

// alive says whether cc is still checked and x/net has not marked it dead.
func (h *h2health) alive(cc *http2.ClientConn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, checked := h.checks[cc]
	_, dead := h.dead[cc]
	return checked && !dead
}

// watched is how many connections have a health check, for tests.
func (h *h2health) watched() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.checks)
}
