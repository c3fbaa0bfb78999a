package pool

import (
	"net/http"
	"net/url"
	"sync/atomic"
)

// Lease is one user's hold on a cluster's entry. While it is held the entry's
// connections outlive a retirement for up to Config.RetireGrace, so hold it
// for exactly as long as the proxied request or stream runs.
type Lease struct {
	e        *entry
	released atomic.Bool
	created  bool
}

// Created reports whether this Acquire built the entry (rather than finding
// it pooled): only then can a Remove for its cluster have come before it.
func (l *Lease) Created() bool { return l.created }

// Transport is the HTTP/2-capable transport for ordinary requests, shared by
// all leases of the entry. The caller adds the bearer token per request.
// Each request it sends may have the cluster dialed at most
// maxDialsPerRequest times (see dialGuard): the transport counts them
// itself, so the caller's context carries nothing of the pool's. With
// several addresses it spreads requests over them (spread).
// With tracing on (Config.Tracer), each round trip has a client span.
func (l *Lease) Transport() http.RoundTripper {
	if l.e.traced != nil {
		return l.e.traced
	}
	return spread{l.e}
}

// PickAddress sets u's host to the entry's next address that is up, for a
// request that dials once and keeps its connection (exec, attach,
// port-forward through UpgradeTransport). u's host must be one of the
// entry's addresses; with one address it is left as it is.
func (l *Lease) PickAddress(u *url.URL) {
	if e := l.e; len(e.addrs) > 1 && e.addressOf(canonicalAddr(u, "443")) != nil {
		u.Host = e.pick(0).host
	}
}

// UpgradeTransport is an HTTP/1.1-only transport over the same tracked
// dialer, for exec/attach/port-forward through UpgradeAwareHandler (whose
// DialURL reads its DialContext and TLSClientConfig). It is built on the
// entry's first call and shared by its leases.
func (l *Lease) UpgradeTransport() *http.Transport { return l.e.upgradeTransport() }

// Cluster is the ClusterGateway name the lease was acquired for.
func (l *Lease) Cluster() string { return l.e.cluster }

// Fingerprint is the fingerprint of the Target the entry was built from.
func (l *Lease) Fingerprint() string { return l.e.fp }

// Release ends the lease; calling it again does nothing.
func (l *Lease) Release() {
	if l.released.CompareAndSwap(false, true) {
		l.e.release(l.e.pool.now())
	}
}
