package konnectivity

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client"
)

// tunnel is one reusable konnectivity tunnel (one gRPC connection to the
// proxy-server) plus what the Manager needs to retire it: the live
// connections dialed through it and whether its gRPC connection is gone.
type tunnel struct {
	id        string // material id
	proxyAddr string
	rt        client.ReusableTunnel
	cc        atomic.Pointer[grpc.ClientConn] // rt's, for health checks (health.go)
	capturing atomic.Bool

	live    atomic.Int64  // connections dialed through it and not closed yet
	retired atomic.Bool   // no longer takes new dials
	idle    chan struct{} // signalled when a retired tunnel's last conn closes

	mu        sync.Mutex
	armed     bool         // built: a lost proxy connection now means a dead tunnel
	proxyConn *watchedConn // the latest TCP connection grpc made to the proxy-server
	dead      bool
	lost      bool // dead because its TCP connection closed (so its conns are gone too)
	cause     error
	connErr   error // first error seen on the proxy connection
	onDead    func()

	closeOnce sync.Once
	onClose   func()
}

func newTunnel(id, proxyAddr string, onDead, onClose func()) *tunnel {
	return &tunnel{id: id, proxyAddr: proxyAddr, idle: make(chan struct{}, 1), onDead: onDead, onClose: onClose}
}

func (t *tunnel) lostErr() error {
	if err := t.connError(); err != nil {
		return fmt.Errorf("lost the connection to proxy-server %s: %w", t.proxyAddr, err)
	}
	return fmt.Errorf("lost the connection to proxy-server %s", t.proxyAddr)
}

// noteConnErr keeps the first error seen on the proxy connection.
func (t *tunnel) noteConnErr(err error) {
	t.mu.Lock()
	if t.connErr == nil {
		t.connErr = err
	}
	t.mu.Unlock()
}

func (t *tunnel) connError() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.connErr == nil {
		return errors.New("the connection closed")
	}
	return t.connErr
}

// arm starts watching the proxy connection, once the tunnel is built: closes
// seen while grpc was still trying (failed handshakes) are not deaths.
func (t *tunnel) arm() {
	t.mu.Lock()
	t.armed = true
	gone := t.proxyConn == nil || t.proxyConn.closed.Load()
	t.mu.Unlock()
	if gone {
		t.markDead(t.lostErr(), true)
	}
}

func (t *tunnel) setProxyConn(c *watchedConn) {
	t.mu.Lock()
	t.proxyConn = c
	t.mu.Unlock()
}

func (t *tunnel) proxyConnClosed(c *watchedConn) {
	t.mu.Lock()
	watched := t.armed && t.proxyConn == c
	t.mu.Unlock()
	if watched {
		t.markDead(t.lostErr(), true)
	}
}

// markDead records why the tunnel cannot take dials; lost means its gRPC
// connection is gone, so nothing on it can still work.
func (t *tunnel) markDead(cause error, lost bool) {
	t.mu.Lock()
	first := !t.dead
	if first {
		t.dead, t.lost, t.cause = true, lost, cause
	}
	t.mu.Unlock()
	if first && t.onDead != nil {
		t.onDead()
	}
}

func (t *tunnel) health() (dead, lost bool, cause error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.dead, t.lost, t.cause
}

func (t *tunnel) acquire() { t.live.Add(1) }

func (t *tunnel) release() {
	if t.live.Add(-1) == 0 && t.retired.Load() {
		select {
		case t.idle <- struct{}{}:
		default:
		}
	}
}

// close closes the gRPC connection, which ends every connection on it.
// ReusableTunnel.Close waits until its streams have drained.
func (t *tunnel) close() {
	t.closeOnce.Do(func() {
		if t.rt != nil {
			_ = t.rt.Close()
		}
		if t.onClose != nil {
			t.onClose()
		}
	})
}

// trackedConn releases its tunnel's live count once, on the first Close.
// It also names its peer: konnectivity conns return nil addresses, which
// callers that log or format them do not expect.
type trackedConn struct {
	net.Conn
	t      *tunnel
	once   sync.Once
	remote tunnelAddr
	sender sender
}

func newTrackedConn(c net.Conn, t *tunnel, addr string) *trackedConn {
	tc := &trackedConn{Conn: c, t: t, remote: tunnelAddr(addr)}
	tc.sender.start(c)
	return tc
}

func (c *trackedConn) Write(p []byte) (int, error) { return c.sender.write(p) }

func (c *trackedConn) RemoteAddr() net.Addr { return c.remote }
func (c *trackedConn) LocalAddr() net.Addr  { return tunnelAddr("konnectivity") }

// tunnelAddr is an address reached through the tunnel.
type tunnelAddr string

func (a tunnelAddr) Network() string { return "tcp" }
func (a tunnelAddr) String() string  { return string(a) }

func (c *trackedConn) Close() error {
	c.sender.halt()
	err := c.Conn.Close()
	c.once.Do(c.t.release)
	return err
}

// watchedConn is the TCP connection grpc made to the proxy-server; its Close
// (grpc closes it when the transport is lost) tells the tunnel.
type watchedConn struct {
	net.Conn
	t       *tunnel
	closed  atomic.Bool
	onClose func() // counts it closed, once
}

func (c *watchedConn) Close() error {
	err := c.Conn.Close()
	if !c.closed.Swap(true) {
		if c.onClose != nil {
			c.onClose()
		}
		c.t.proxyConnClosed(c)
	}
	return err
}
