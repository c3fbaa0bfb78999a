package pool

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// trackedConn is every connection an entry dials, so retiring the entry can
// close connections that http.Transport still holds for live streams.
type trackedConn struct {
	net.Conn
	e     *entry
	a     *address // the address it was dialed to
	once  sync.Once
	ready bool       // counted in a.ready; under e.mu
	guard *dialGuard // whose place it holds (HTTP/2 ones); under e.mu
	// dials is the count of the request that had it dialed (dialGuard), to
	// give the dial back if x/net closes it unused (offerH2); nil once x/net
	// decided: it lives in the request's context, which a pooled connection
	// must not keep (megabytes of finished requests at 1,000 entries).
	dials *requestDials
	// offer is where x/net's decision about it stands (offerH2): offerNone,
	// then offerPending while x/net decides, then what x/net did first.
	offer atomic.Uint32
}

// What the connection saw first while x/net decided whether to use it.
const (
	offerNone    uint32 = iota
	offerPending        // handed to x/net, nothing seen yet
	offerWritten        // x/net wrote to it: it started HTTP/2 (NewClientConn)
	offerClosing        // crypto/tls began to close it (closeNotify's deadline)
)

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.e.untrack(c) })
	return err
}

func (c *trackedConn) Write(b []byte) (int, error) {
	if c.offer.Load() == offerPending && c.offer.CompareAndSwap(offerPending, offerWritten) && testHookOfferWritten != nil {
		testHookOfferWritten(c)
	}
	return c.Conn.Write(b)
}

// testHookOfferWritten, set by tests only, runs when x/net starts HTTP/2 on
// a connection offered to it (NewClientConn, before the connection is in
// its pool): the window in which another new connection is its duplicate.
var testHookOfferWritten func(*trackedConn)

// SetWriteDeadline is where closing a TLS connection starts: crypto/tls
// sets a write deadline before it writes its close_notify alert, and x/net
// sets none before its first write (Transport.WriteByteTimeout is 0).
func (c *trackedConn) SetWriteDeadline(t time.Time) error {
	if c.offer.Load() == offerPending {
		c.offer.CompareAndSwap(offerPending, offerClosing)
	}
	return c.Conn.SetWriteDeadline(t)
}
