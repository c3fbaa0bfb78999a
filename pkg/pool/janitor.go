package pool

import (
	"context"
	"time"
)

// janitor retires idle entries. It is the pool's only periodic goroutine.
func (p *Pool) janitor(ctx context.Context) {
	defer p.wg.Done()
	// Sweeping at a fraction of the TTL bounds how long past it an entry
	// lives; the cap keeps long TTLs responsive.
	every := min(max(p.opts.IdleTTL/2, 10*time.Millisecond), 30*time.Second)
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			p.retireIdle()
		}
	}
}

// retireIdle retires entries without leases that were unused for IdleTTL.
// It scans every entry (release times do not follow LRU order), at most
// twice per TTL, not per request.
func (p *Pool) retireIdle() {
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
	p.sweeps.Add(1)
}
