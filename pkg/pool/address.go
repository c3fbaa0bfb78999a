package pool

import (
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// addressRetryAfter is how long an address whose dial (or probe) failed is
// left out of the spreading. A later successful dial or probe of it brings
// it back at once; the prober probes it every --probe-interval.
const addressRetryAfter = 10 * time.Second

// address is one of an entry's API servers: the same API, CA and
// credential as the others, its own connections. Each has its own cold
// start and its own cap of HTTP/2 connections, so one that takes no
// requests cannot use up the places of the others.
type address struct {
	e        *entry
	index    int
	host     string // as in a URL: host[:port]
	hostport string // canonical host:port, as http.Transport dials it
	cold     *coldStart
	dials    *dialGuard
	// ready counts its connections that finished their TLS handshake and
	// are open: with none, requests wait for one dial (coldStart).
	ready atomic.Int32
	// http1 is set when it answered a dial offering HTTP/2 with HTTP/1.1:
	// its cold starts leave the dial to net/http (firstRoundTrip).
	http1 atomic.Bool
	// downUntil is when, on the pool clock, it may be picked again after a
	// failed dial or probe; 0 while it is up.
	downUntil atomic.Int64
}

func newAddress(e *entry, index int, u *url.URL) *address {
	a := &address{e: e, index: index, host: u.Host, hostport: canonicalAddr(u, "443"), dials: newDialGuard(e.pool.opts.MaxConnsPerCluster)}
	a.cold = &coldStart{a: a}
	return a
}

// up says whether the spreading may pick it now.
func (a *address) up(now int64) bool {
	d := a.downUntil.Load()
	return d == 0 || now >= d
}

// failed leaves it out for addressRetryAfter.
func (a *address) failed() {
	a.downUntil.Store(a.e.pool.now() + int64(addressRetryAfter))
}

// succeeded brings it back.
func (a *address) succeeded() { a.downUntil.Store(0) }

// addressOf is the entry's address that hostport (as dialed) names, or nil.
func (e *entry) addressOf(hostport string) *address {
	for _, a := range e.addrs {
		if strings.EqualFold(a.hostport, hostport) {
			return a
		}
	}
	return nil
}

// pick is the next address in turn that is up and not in tried (a bit per
// index); when none of those is up, the next not tried; nil when all were
// tried.
func (e *entry) pick(tried uint64) *address {
	n := len(e.addrs)
	start := int(e.next.Add(1) % uint32(n))
	now := e.pool.now()
	var fallback *address
	for i := range n {
		a := e.addrs[(start+i)%n]
		if tried&(1<<a.index) != 0 {
			continue
		}
		if a.up(now) {
			return a
		}
		if fallback == nil {
			fallback = a
		}
	}
	return fallback
}
