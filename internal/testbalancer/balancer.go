// Package testbalancer is a round-robin TCP forwarder on loopback, standing
// in tests and the local environment for a Service or a TCP load balancer
// in front of several replicas (konnectivity agents reach every
// proxy-server through one address this way).
package testbalancer

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Balancer forwards each connection it accepts to the next backend in turn
// that accepts a connection (a dead one refuses, and is skipped) and that
// Ready, if set, allows. Connections already made stay where they are, as
// with kube-proxy.
type Balancer struct {
	Addr string // host:port it listens on

	// Ready, if set before Start, tells whether backend i may take new
	// connections (as endpoints drop a pod that is not ready).
	Ready func(i int) bool

	ln       net.Listener
	backends []string
	next     atomic.Uint64
	wg       sync.WaitGroup
	mu       sync.Mutex
	open     map[net.Conn]struct{}
	closed   bool
}

// Listen listens on host (port chosen by the kernel); Start begins forwarding.
func Listen(host string, backends ...string) (*Balancer, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, err
	}
	return &Balancer{Addr: ln.Addr().String(), ln: ln, backends: backends, open: map[net.Conn]struct{}{}}, nil
}

// Start forwards until Close.
func (b *Balancer) Start() { b.wg.Go(b.accept) }

// Port is the port it listens on.
func (b *Balancer) Port() int { return b.ln.Addr().(*net.TCPAddr).Port }

func (b *Balancer) accept() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		up := b.dial()
		if up == nil {
			c.Close() // no backend: as a Service without endpoints
			continue
		}
		if !b.track(c, up) {
			return
		}
		b.wg.Add(2)
		go b.pipe(up, c)
		go b.pipe(c, up)
	}
}

// dial connects to the next backend that is ready and accepts, or nil.
func (b *Balancer) dial() net.Conn {
	for range b.backends {
		i := int(b.next.Add(1) % uint64(len(b.backends)))
		if b.Ready != nil && !b.Ready(i) {
			continue
		}
		if up, err := net.DialTimeout("tcp", b.backends[i], 5*time.Second); err == nil {
			return up
		}
	}
	return nil
}

func (b *Balancer) pipe(dst, src net.Conn) {
	defer b.wg.Done()
	// Plain reads and writes, not io.Copy's splice(2) between two TCP
	// connections: that goes through pipes Go keeps in a process-wide pool,
	// open until the GC drops them, and a test counting its process's fds
	// would count them.
	_, _ = io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, make([]byte, 32<<10))
	// One direction ended: end both, as a TCP proxy does.
	b.mu.Lock()
	delete(b.open, dst)
	delete(b.open, src)
	b.mu.Unlock()
	dst.Close()
	src.Close()
}

func (b *Balancer) track(cs ...net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		b.open[c] = struct{}{}
	}
	return true
}

// OpenConns counts the connections it holds open (each forwarded
// connection is two: the client's and the backend's), for tests that count
// their process's fds.
func (b *Balancer) OpenConns() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.open)
}

// Close stops listening, cuts the connections it carries and waits for its goroutines.
func (b *Balancer) Close() {
	b.ln.Close()
	b.mu.Lock()
	b.closed = true
	for c := range b.open {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}
