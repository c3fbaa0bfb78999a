package pool

import "time"

// retireLocked starts retiring e, which the caller already removed from the
// LRU under p.mu (so it is never handed out again, and wg.Add cannot race
// with Close's Wait).
func (p *Pool) retireLocked(e *entry, reason string) {
	p.retiredBy[reason]++
	p.noteRetired()
	drained := e.markRetiring()
	p.wg.Add(1)
	go p.finishRetire(e, drained)
}

// finishRetire closes idle connections now and the rest once the entry's
// leases are released or the grace period ends, whichever comes first; on
// Close at once (what is still live then are upgraded streams the server's
// shutdown does not wait for).
func (p *Pool) finishRetire(e *entry, drained <-chan struct{}) {
	defer p.wg.Done()
	e.closeIdle()
	if p.opts.RetireGrace > 0 {
		timer := time.NewTimer(p.opts.RetireGrace)
		select {
		case <-drained:
		case <-timer.C:
		case <-p.shutdown:
		}
		timer.Stop()
	}
	e.closeAll()
	p.noteRetireDone()
}
