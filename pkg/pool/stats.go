package pool

import (
	"maps"
	"sync/atomic"
)

// Stats is a snapshot of the pool's counters (its metrics, see Collector).
type Stats struct {
	Live          int              // entries that can be handed out
	Retiring      int              // retired entries whose connections are not all closed yet
	Created       int64            // entries ever created
	Retired       map[string]int64 // retirements by reason (Reason* constants)
	ActiveStreams int64            // leases not yet released
	OpenConns     int64            // tracked connections not yet closed
	Dials         int64            // dial attempts
	DialFailures  int64            // dial attempts that failed (before TLS)
	RefusedDials  map[string]int64 // dials refused by reason (Refused* constants): the cluster does not keep its connections
	// AddressFailovers counts requests sent to another of a cluster's
	// addresses after their connection to one failed (spread).
	AddressFailovers int64
}

type counters struct {
	retiring       atomic.Int64
	created        atomic.Int64
	activeStreams  atomic.Int64
	openConns      atomic.Int64
	dials          atomic.Int64
	dialFailures   atomic.Int64
	refusedRedials atomic.Int64
	refusedCapped  atomic.Int64
	failovers      atomic.Int64
	sweeps         atomic.Int64 // janitor passes, for tests
}

// Stats returns a snapshot of the pool's counters.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	live := p.lru.Len()
	retired := maps.Clone(p.retiredBy)
	p.mu.Unlock()
	return Stats{
		Live:             live,
		Retiring:         int(p.retiring.Load()),
		Created:          p.created.Load(),
		Retired:          retired,
		ActiveStreams:    p.activeStreams.Load(),
		OpenConns:        p.openConns.Load(),
		Dials:            p.dials.Load(),
		DialFailures:     p.dialFailures.Load(),
		RefusedDials:     map[string]int64{RefusedRedials: p.refusedRedials.Load(), RefusedCapped: p.refusedCapped.Load()},
		AddressFailovers: p.failovers.Load(),
	}
}

// The note* helpers keep the pool's counters; Collector reads them.

func (p *Pool) noteCreated() { p.created.Add(1) }

// noteRetired: the entry left the LRU and is now retiring.
func (p *Pool) noteRetired() { p.retiring.Add(1) }

func (p *Pool) noteRetireDone()    { p.retiring.Add(-1) }
func (p *Pool) noteStreamStarted() { p.activeStreams.Add(1) }
func (p *Pool) noteStreamEnded()   { p.activeStreams.Add(-1) }
func (p *Pool) noteConnOpened()    { p.openConns.Add(1) }
func (p *Pool) noteConnClosed()    { p.openConns.Add(-1) }
func (p *Pool) noteDial()          { p.dials.Add(1) }
func (p *Pool) noteDialFailure()   { p.dialFailures.Add(1) }
func (p *Pool) noteFailover()      { p.failovers.Add(1) }

// noteDialRefused counts a dial the guard refused, by its Refused* reason.
func (p *Pool) noteDialRefused(reason string) {
	if reason == RefusedCapped {
		p.refusedCapped.Add(1)
	} else {
		p.refusedRedials.Add(1)
	}
}
