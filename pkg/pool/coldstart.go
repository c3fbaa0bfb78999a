package pool

import (
	"net/http"
	"sync"
	"sync/atomic"
)

// coldStart is an entry's transport for ordinary requests, as leases and
// probes get it. While the entry has no connection that finished its TLS
// handshake, net/http dials once per waiting request, and an HTTP/2
// connection then replaces all but one of them: a cold start with many
// requests to one cluster (a restarted gateway, a controller's burst) made
// a handshake per request, on the gateway and on the cluster. Here the first
// request dials (the entry itself, not net/http: firstRoundTrip), and the
// others wait until that dial ends: then they use its connection, or fail
// with its error, as they would have after dialing themselves. With a
// connection open nothing waits; net/http dials more connections when one
// is not enough (HTTP/1.1, or HTTP/2's stream limit).
type coldStart struct {
	a  *address // each address of an entry starts cold on its own
	mu sync.Mutex
	// dial is the dial that requests wait for, nil when none is awaited:
	// read without the lock on every request, set and cleared under mu.
	dial atomic.Pointer[awaitedDial]
}

// awaitedDial ends when the entry's next dial does, or when the request
// that started it returns first (it was cancelled, or did not dial).
type awaitedDial struct {
	done chan struct{}
	err  error // the dial's error; nil when it made a connection (or did not end)
}

// RoundTrip sends req once the address has a connection that serves it:
// at once when one is ready and no dial is awaited; else after the awaited
// dial, or after its own (the first request without one dials). A
// connection counts as ready at the end of its handshake, before x/net's
// pool hands it out: a request that went to net/http in between found no
// connection there and dialed its own (TestColdStartPerAddress under CPU
// load: 4 dials for 2 addresses). So while a dial is awaited, a request
// waits for it even when a connection is ready.
func (c *coldStart) RoundTrip(req *http.Request) (*http.Response, error) {
	for c.a.ready.Load() == 0 || c.dial.Load() != nil {
		if testHookNoReadyConn != nil {
			testHookNoReadyConn(req)
		}
		c.mu.Lock()
		d := c.dial.Load()
		if d == nil && c.a.ready.Load() != 0 {
			// A connection became ready after the check above, and the
			// dial that made it has ended: a dial now would find it and be
			// closed, and the requests waiting for it would wait for this
			// request to end.
			c.mu.Unlock()
			break
		}
		if d == nil {
			// This request dials; the others wait for it.
			d = &awaitedDial{done: make(chan struct{})}
			c.dial.Store(d)
			c.mu.Unlock()
			// They wait for the dial, not for this request: a dial that
			// finds a usable connection, closes its own and sends this
			// request on that one hands no new connection out (connUsable).
			resp, err := c.a.firstRoundTrip(req, func() { c.end(d, nil) })
			c.end(d, nil)
			return resp, err
		}
		c.mu.Unlock()
		select {
		case <-d.done:
			if d.err != nil {
				closeBody(req)
				return nil, d.err
			}
		case <-req.Context().Done():
			closeBody(req)
			return nil, req.Context().Err()
		}
	}
	return c.a.e.rt.RoundTrip(req)
}

// testHookNoReadyConn, set by tests only, runs when a request found no ready
// connection or an awaited dial, before it takes the cold start's lock: the
// window in which a descheduled request sees a connection become ready.
var testHookNoReadyConn func(*http.Request)

// connUsable ends the awaited dial: a new HTTP/2 connection serves requests.
func (c *coldStart) connUsable() { c.dialEnded(nil) }

// dialEnded ends the awaited dial, if any, with a dial's outcome.
func (c *coldStart) dialEnded(err error) {
	if d := c.dial.Load(); d != nil {
		c.end(d, err)
	}
}

// end releases d's waiters with err, once; a later dial is awaited anew.
func (c *coldStart) end(d *awaitedDial, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dial.Load() != d {
		return // already ended
	}
	d.err = err
	close(d.done)
	c.dial.Store(nil)
}

// closeBody honours the RoundTripper contract for a request not sent.
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
