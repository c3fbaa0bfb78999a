package pool

import (
	"net/http"
	"net/url"
)

// Probe runs fn with a transport to t's cluster without disturbing the pool:
// each request goes to the address its URL names (one of t's addresses).
// health probes must not evict the entries users are working with, keep idle
// entries alive, or count as user traffic. When the live entry was built from
// a Target of t's shape, fn shares its connections (no new dial, and the
// probe sees the connection users get) under a lease that neither refreshes
// the entry's place in the LRU nor its idleness. Otherwise fn gets a
// transient entry, whose connections are closed when fn returns.
func (p *Pool) Probe(t *Target, fn func(http.RoundTripper) error) error {
	if e, ok, err := p.peekSame(t); ok {
		if err != nil {
			return err
		}
		defer e.releaseQuiet()
		return fn(p.opts.Tracer.WrapTransport(countedDials{byURL{e}}))
	}
	if err := t.validate(); err != nil {
		return err
	}
	if err := p.checkLiterals(t); err != nil {
		return err
	}
	e, err := p.newEntry(t, "")
	if err != nil {
		return err
	}
	e.transient = true
	defer e.closeAll()
	return fn(p.opts.Tracer.WrapTransport(countedDials{byURL{e}}))
}

// ReportAddress tells the live entry of t's shape, if any, what a probe of
// one of its addresses found: one that did not answer is left out of the
// spreading (for addressRetryAfter, or until a probe or dial of it
// succeeds), one that answered is brought back.
func (p *Pool) ReportAddress(t *Target, addr *url.URL, reachable bool) {
	e, ok, err := p.peekSame(t)
	if !ok || err != nil {
		return
	}
	defer e.releaseQuiet()
	if a := e.addressOf(canonicalAddr(addr, "443")); a != nil {
		if reachable {
			a.succeeded()
		} else {
			a.failed()
		}
	}
}

// peekSame is acquireSame without touching the LRU order, idleness or the
// stream count.
func (p *Pool) peekSame(t *Target) (e *entry, ok bool, err error) {
	if t == nil {
		return nil, false, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, true, ErrClosed
	}
	if e, found := p.lru.Peek(t.Cluster); found && e.shape.same(t) {
		e.mu.Lock()
		e.active++
		e.mu.Unlock()
		return e, true, nil
	}
	return nil, false, nil
}

// releaseQuiet ends a lease's or peekSame's hold; a retiring entry may
// drain now.
func (e *entry) releaseQuiet() {
	e.lastActive.Store(e.pool.now())
	e.mu.Lock()
	e.active--
	if e.retiring && e.active == 0 {
		close(e.drained)
	}
	e.mu.Unlock()
}
