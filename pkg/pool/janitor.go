package pool

import (
	"context"
	"time"

	"k8s.io/utils/clock"
)

// janitor retires idle entries and closes the idle connections of unused
// ones, on each tick of ticker (every sweepEvery). It is the pool's only
// periodic goroutine.
func (p *Pool) janitor(ctx context.Context, ticker clock.Ticker) {
	defer p.wg.Done()
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
			p.retireIdle()
			p.closeIdleConns()
			p.sweeps.Add(1)
		}
	}
}

// retireIdle retires entries without leases that were unused for IdleTTL.
// It scans every entry (release times do not follow LRU order), at most
// twice per TTL, not per request.
func (p *Pool) retireIdle() {
	if p.opts.IdleTTL <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	cutoff := p.now() - int64(p.opts.IdleTTL)
	for _, cluster := range p.lru.Keys() {
		e, _ := p.lru.Peek(cluster)
		if e.lastUsed.Load() <= cutoff && e.idle() {
			p.lru.Remove(cluster)
			p.retireLocked(e, ReasonIdle)
		}
	}
}

// closeIdleConns closes the idle connections of entries without leases
// that no request or health probe used for IdleConnTimeout; the entries stay
// pooled. It stands in for the transports' idle timers, which are off (see
// newTransport), and like them counts probes as use: a probed connection is
// kept rather than closed and dialed again by the next probe.
// Connections are closed outside the pool lock (a TLS close may wait on its
// peer); a request that starts meanwhile keeps the connection it was given.
func (p *Pool) closeIdleConns() {
	if p.opts.IdleConnTimeout <= 0 {
		return
	}
	var unused []*entry
	p.mu.Lock()
	cutoff := p.now() - int64(p.opts.IdleConnTimeout)
	for _, e := range p.lru.Values() {
		if e.lastActive.Load() <= cutoff && e.idle() && e.hasConns() {
			unused = append(unused, e)
		}
	}
	p.mu.Unlock()
	for _, e := range unused {
		e.closeIdle()
	}
}

// sweepEvery is the janitor's period: a fraction of each timeout it keeps
// bounds how long past it an entry or a connection lives; the cap keeps long
// timeouts responsive. 0 means no janitor.
func (c *Config) sweepEvery() time.Duration {
	var every time.Duration
	for _, d := range []time.Duration{c.IdleTTL, c.IdleConnTimeout} {
		if d > 0 {
			s := min(max(d/2, 10*time.Millisecond), 30*time.Second)
			if every == 0 || s < every {
				every = s
			}
		}
	}
	return every
}
