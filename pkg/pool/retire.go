package pool

import "k8s.io/utils/clock"

// retireLocked starts retiring e, which the caller already removed from the
// LRU under p.mu (so it is never handed out again, and wg.Add cannot race
// with Close's Wait). The grace period starts now.
func (p *Pool) retireLocked(e *entry, reason string) {
	p.retiredBy[reason]++
	p.noteRetired()
	drained := e.markRetiring()
	var grace clock.Timer
	if p.opts.RetireGrace > 0 {
		grace = p.clock.NewTimer(p.opts.RetireGrace)
	}
	p.wg.Add(1)
	go p.finishRetire(e, drained, grace)
}

// finishRetire closes idle connections now and the rest once the entry's
// leases are released or the grace period ends (grace fires; nil: no grace),
// whichever comes first; on Close at once (what is still live then are
// upgraded streams the server's shutdown does not wait for).
func (p *Pool) finishRetire(e *entry, drained <-chan struct{}, grace clock.Timer) {
	defer p.wg.Done()
	e.closeIdle()
	if grace != nil {
		select {
		case <-drained:
		case <-grace.C():
		case <-p.shutdown:
		}
		grace.Stop()
	}
	e.closeAll()
	p.noteRetireDone()
}
