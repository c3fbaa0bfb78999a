package proxy

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/clustergateway/cluster-gateway/pkg/pool"
)

// errUpgradeDial marks an upgrade whose backend connection was not set up
// (dialed, and answered) within the dial and response-header timeouts.
var errUpgradeDial = errors.New("no upgraded connection within the dial and response-header timeouts")

// upgradeWatchdog bounds the setup of an upgrade (exec, attach,
// port-forward). UpgradeAwareHandler dials and does the TLS handshake with
// the request's context, which a long-running request never times out: a
// cluster that accepts TCP but never answers would hang the caller. Until the
// handler hijacks the client connection (the upgrade is set up), the context
// is cancelled after timeout, and the backend connection (dialed through
// upstreamUpgrade) is closed then and reads at most 1 MiB: the handler writes
// the request and reads the answer without the context. From then on the
// stream lives as long as it does.
func upgradeWatchdog(w http.ResponseWriter, req *http.Request, timeout time.Duration) (http.ResponseWriter, *http.Request, *upgradeSetup, func()) {
	ctx, cancel := context.WithCancelCause(req.Context())
	timer := time.AfterFunc(timeout, func() { cancel(errUpgradeDial) })
	setup := &upgradeSetup{deadline: time.Now().Add(timeout)}
	hw := &hijackNotifier{ResponseWriter: w, onHijack: func() { timer.Stop(); setup.done() }}
	return hw, req.WithContext(ctx), setup, func() {
		timer.Stop()
		setup.done() // an upgrade refused by the cluster: no connection timer outlives it
		cancel(nil)
	}
}

var errUpgradeHeaderTooLarge = errors.New("the cluster's answer to the upgrade exceeds 1 MiB before its headers end")

// upgradeSetup bounds the backend connections of one upgrade until the
// client connection is hijacked: UpgradeAwareHandler writes the request and
// reads the answer with no context, so each connection is closed at the
// deadline unless the upgrade is set up by then, and reads at most
// pool.MaxResponseHeaderBytes (what the pooled transports allow a response's
// headers).
// Closed rather than given a deadline: a konnectivity tunnel's connections
// have none.
type upgradeSetup struct {
	deadline time.Time
	mu       sync.Mutex
	conns    []*setupConn
	finished bool
	span     trace.Span // the upgrade's client span, when traced: ends with the setup
}

func (s *upgradeSetup) guard(c net.Conn) net.Conn {
	sc := &setupConn{Conn: c}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.finished {
		sc.setUp.Store(true)
		return sc
	}
	sc.timer = time.AfterFunc(time.Until(s.deadline), func() {
		sc.expired.Store(true)
		_ = c.Close()
	})
	s.conns = append(s.conns, sc)
	return sc
}

func (s *upgradeSetup) done() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finished = true
	if s.span != nil {
		s.span.End()
		s.span = nil
	}
	for _, c := range s.conns {
		c.setUp.Store(true)
		c.timer.Stop()
	}
	s.conns = nil
}

type setupConn struct {
	net.Conn
	timer   *time.Timer
	expired atomic.Bool // closed at the deadline, not set up
	setUp   atomic.Bool
	read    int64 // only the handler's goroutine reads before set-up
}

func (c *setupConn) Read(p []byte) (int, error) {
	if c.setUp.Load() {
		return c.Conn.Read(p)
	}
	if c.read >= pool.MaxResponseHeaderBytes {
		return 0, errUpgradeHeaderTooLarge
	}
	if rest := pool.MaxResponseHeaderBytes - c.read; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := c.Conn.Read(p)
	c.read += int64(n)
	if err != nil && c.expired.Load() {
		err = errUpgradeDial
	}
	return n, err
}

func (c *setupConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil && c.expired.Load() {
		err = errUpgradeDial
	}
	return n, err
}

// hijackNotifier tells when the client connection is taken over.
type hijackNotifier struct {
	http.ResponseWriter
	onHijack func()
}

func (h *hijackNotifier) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := h.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("the connection cannot be hijacked for an upgrade")
	}
	h.onHijack()
	return hj.Hijack()
}

func (h *hijackNotifier) Flush() {
	if f, ok := h.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (h *hijackNotifier) Unwrap() http.ResponseWriter { return h.ResponseWriter }
