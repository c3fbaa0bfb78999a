package localenv

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Balancer stands in front of gateway replicas as a Service does in a
// cluster: it forwards each TCP connection to a ready replica (round robin),
// and stops sending new connections to one whose /readyz fails (as endpoints
// drop a pod that is not ready). Connections already made stay where they
// are, as with kube-proxy. It listens on 127.0.0.1 and runs in this process.
type Balancer struct {
	Port int

	ln       net.Listener
	backends []*backend
	next     atomic.Uint64
	conns    sync.WaitGroup
	stop     context.CancelFunc
	done     sync.WaitGroup
	mu       sync.Mutex
	open     map[net.Conn]struct{}
}

type backend struct {
	g     *Gateway
	ready atomic.Bool
}

// StartBalancer balances over the replicas; Close stops it.
func (e *Env) StartBalancer(replicas ...*Gateway) (*Balancer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	client, err := mtlsClient(e.Gateway.CA.CertPEM, e.Hub.Admin)
	if err != nil {
		ln.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Balancer{Port: ln.Addr().(*net.TCPAddr).Port, ln: ln, stop: cancel, open: map[net.Conn]struct{}{}}
	for _, g := range replicas {
		be := &backend{g: g}
		b.backends = append(b.backends, be)
		b.done.Go(func() { b.check(ctx, client, be) })
	}
	b.done.Go(b.accept)
	return b, nil
}

// check polls a replica's /readyz, as a readiness probe does.
func (b *Balancer) check(ctx context.Context, client *http.Client, be *backend) {
	defer client.CloseIdleConnections()
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		be.ready.Store(httpOK(cctx, client, be.g.URL+"/readyz") == nil)
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (b *Balancer) accept() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		be := b.pick()
		if be == nil {
			c.Close() // no ready replica: as a Service without endpoints
			continue
		}
		up, err := net.DialTimeout("tcp", hostPort("127.0.0.1", be.g.Port), 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		b.track(c, up)
		b.conns.Add(2)
		go b.pipe(up, c)
		go b.pipe(c, up)
	}
}

func (b *Balancer) pick() *backend {
	for range b.backends {
		be := b.backends[b.next.Add(1)%uint64(len(b.backends))]
		if be.ready.Load() {
			return be
		}
	}
	return nil
}

func (b *Balancer) pipe(dst, src net.Conn) {
	defer b.conns.Done()
	_, _ = io.Copy(dst, src)
	// One direction ended: end both, as a TCP proxy does.
	b.untrack(dst, src)
	dst.Close()
	src.Close()
}

func (b *Balancer) track(cs ...net.Conn) {
	b.mu.Lock()
	for _, c := range cs {
		b.open[c] = struct{}{}
	}
	b.mu.Unlock()
}

func (b *Balancer) untrack(cs ...net.Conn) {
	b.mu.Lock()
	for _, c := range cs {
		delete(b.open, c)
	}
	b.mu.Unlock()
}

// Close stops listening, cuts the connections it carries and waits for its goroutines.
func (b *Balancer) Close() {
	b.stop()
	b.ln.Close()
	b.mu.Lock()
	for c := range b.open {
		c.Close()
	}
	b.mu.Unlock()
	b.conns.Wait()
	b.done.Wait()
}
