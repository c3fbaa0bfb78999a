package proxy

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// errUpgradeDial marks an upgrade whose backend connection was not set up
// (dialed, and answered) within the dial and response-header timeouts.
var errUpgradeDial = errors.New("no upgraded connection within the dial and response-header timeouts")

// upgradeWatchdog bounds the setup of an upgrade (exec, attach,
// port-forward). UpgradeAwareHandler dials and does the TLS handshake with
// the request's context, which a long-running request never times out: a
// cluster that accepts TCP but never answers would hang the caller. Until the
// handler hijacks the client connection (the upgrade is set up), the context
// is cancelled after timeout; from then on the stream lives as long as it does.
func upgradeWatchdog(w http.ResponseWriter, req *http.Request, timeout time.Duration) (http.ResponseWriter, *http.Request, func()) {
	ctx, cancel := context.WithCancelCause(req.Context())
	timer := time.AfterFunc(timeout, func() { cancel(errUpgradeDial) })
	hw := &hijackNotifier{ResponseWriter: w, onHijack: func() { timer.Stop() }}
	return hw, req.WithContext(ctx), func() {
		timer.Stop()
		cancel(nil)
	}
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
