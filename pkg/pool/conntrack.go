package pool

import (
	"net"
	"sync"
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
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.e.untrack(c) })
	return err
}
