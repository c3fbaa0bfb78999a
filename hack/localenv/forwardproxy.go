package localenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// ForwardProxy is a forward proxy running in this process on ForwardProxyIP (HTTP
// CONNECT or SOCKS5), for ClusterGateways with spec.endpoint.proxyURL. It
// counts the tunnels it carried, so a test can prove that traffic went
// through it rather than around it, and that every tunnel was closed again.
// It only dials 127.0.0.0/8: nothing a test sends through it leaves the machine.
type ForwardProxy struct {
	Kind string   // "http" or "socks5"
	URL  *url.URL // what spec.endpoint.proxyURL should be: http://127.0.0.252:N or socks5://127.0.0.252:N

	carried atomic.Int64 // upstream connections ever opened
	open    atomic.Int64 // upstream connections not closed yet
	refused atomic.Int64 // dials refused (not loopback) or failed

	delay   time.Duration // added to everything the destination sends (StartDelayingProxy)
	delayed atomic.Int64  // chunks that went through the delay line

	ln        net.Listener
	clients   connSet      // accepted from the gateway (or any client)
	upstreams connSet      // dialed for tunnels
	stop      func() error // stops the protocol server
	logFile   *os.File
	closeMu   sync.Once
	err       error
}

// Carried is how many upstream connections (tunnels) the proxy has opened.
func (p *ForwardProxy) Carried() int64 { return p.carried.Load() }

// Open is how many of them are not closed yet.
func (p *ForwardProxy) Open() int64 { return p.open.Load() }

// Refused is how many tunnels it refused or could not open.
func (p *ForwardProxy) Refused() int64 { return p.refused.Load() }

// ClientConns is how many client connections are open to the proxy.
func (p *ForwardProxy) ClientConns() int { return p.clients.len() }

// Close stops accepting, closes every client and upstream connection, and
// waits for the server's accept loop. It is idempotent.
func (p *ForwardProxy) Close() error {
	p.closeMu.Do(func() {
		err := p.stop() // closes the listener
		p.clients.closeAll()
		p.upstreams.closeAll()
		p.err = errors.Join(err, p.logFile.Close())
	})
	return p.err
}

// dial opens an upstream connection for a tunnel: loopback only, bounded,
// counted, and closed by Close if the protocol server has not closed it.
func (p *ForwardProxy) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		p.refused.Add(1)
		return nil, err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		// Names are not resolved: a test proxy has no business with DNS.
		p.refused.Add(1)
		return nil, fmt.Errorf("%s forward proxy: refusing %s: only 127.0.0.0/8 addresses are proxied here", p.Kind, addr)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		p.refused.Add(1)
		return nil, err
	}
	p.carried.Add(1)
	p.open.Add(1)
	if p.delay > 0 {
		c = newDelayLine(c, p.delay, &p.delayed)
	}
	return p.upstreams.add(c, func() { p.open.Add(-1) }), nil
}

// ForwardProxyIP is where the forward proxies listen: not 127.0.0.1, so a
// gateway may deny that address (the end-to-end suite does, to test the
// endpoint policy with "localhost").
const ForwardProxyIP = "127.0.0.252"

// newForwardProxy listens on ForwardProxyIP and opens its log in the state dir.
func (e *Env) newForwardProxy(kind string) (*ForwardProxy, error) {
	return e.newForwardProxyLogging(kind, "forward-proxy-"+kind)
}

func (e *Env) newForwardProxyLogging(kind, logName string) (*ForwardProxy, error) {
	l, err := net.Listen("tcp", ForwardProxyIP+":0")
	if err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(e.StateDir, "logs", logName+".log"))
	if err != nil {
		l.Close()
		return nil, err
	}
	p := &ForwardProxy{Kind: kind, URL: &url.URL{Scheme: kind, Host: l.Addr().String()}, logFile: f}
	p.ln = trackingListener{Listener: l, clients: &p.clients}
	return p, nil
}

// startForwardProxies starts the HTTP CONNECT and SOCKS5 proxies.
func (e *Env) startForwardProxies() error {
	var err error
	if e.HTTPProxy, err = e.startHTTPConnectProxy(); err != nil {
		return fmt.Errorf("HTTP CONNECT forward proxy: %w", err)
	}
	if e.SOCKS5Proxy, err = e.startSOCKS5Proxy(); err != nil {
		return fmt.Errorf("SOCKS5 forward proxy: %w", err)
	}
	return nil
}

func (e *Env) stopForwardProxies() error {
	var errs []error
	e.mu.Lock()
	proxies := append([]*ForwardProxy{e.HTTPProxy, e.SOCKS5Proxy}, e.delayingProxies...)
	e.mu.Unlock()
	for _, p := range proxies {
		if p != nil {
			errs = append(errs, p.Close())
		}
	}
	return errors.Join(errs...)
}

// connSet holds open connections so Close can cut tunnels that the protocol
// libraries would otherwise keep running; once closed it closes newcomers.
type connSet struct {
	mu     sync.Mutex
	conns  map[*countedConn]struct{}
	closed bool
}

// add wraps c so that closing it removes it from the set and runs onClose.
func (s *connSet) add(c net.Conn, onClose func()) net.Conn {
	cc := &countedConn{Conn: c, onClose: onClose}
	cc.untrack = func() {
		s.mu.Lock()
		delete(s.conns, cc)
		s.mu.Unlock()
	}
	s.mu.Lock()
	closed := s.closed
	if !closed {
		if s.conns == nil {
			s.conns = map[*countedConn]struct{}{}
		}
		s.conns[cc] = struct{}{}
	}
	s.mu.Unlock()
	if closed {
		_ = cc.Close()
	}
	return cc
}

func (s *connSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

func (s *connSet) closeAll() {
	s.mu.Lock()
	s.closed = true
	conns := make([]*countedConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// trackingListener adds every accepted connection to clients.
type trackingListener struct {
	net.Listener
	clients *connSet
}

func (l trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.clients.add(c, nil), nil
}

// countedConn runs its hooks once, on the first Close. It passes CloseWrite
// on, because go-socks5 ends a tunnel only after both directions saw EOF and
// relies on it to tell each side that the other is done. It has no CloseRead,
// so goproxy does not take its half-close path and closes each side fully
// when the other ends.
type countedConn struct {
	net.Conn
	once    sync.Once
	onClose func()
	untrack func()
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		if c.onClose != nil {
			c.onClose()
		}
		c.untrack()
	})
	return err
}

func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}
