package pool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"k8s.io/utils/clock"
)

// ErrClosed is returned by Acquire after Close.
var ErrClosed = errors.New("cluster transport pool is closed")

// Retirement reasons, the values of the reason label of
// cluster_gateway_pool_entry_retirements_total.
const (
	ReasonEvicted  = "evicted"
	ReasonIdle     = "idle"
	ReasonRotated  = "rotated"
	ReasonDeleted  = "deleted"
	ReasonUnusable = "unusable"
	ReasonShutdown = "shutdown"
)

// Pool holds at most Config.Capacity live entries, one per cluster.
type Pool struct {
	opts  Config
	clock clock.WithTicker // idleness, the janitor's sweeps and retirement grace; tests fake it
	start time.Time        // origin of the monotonic clock used for idleness

	mu        sync.Mutex // guards lru, closed, retiredBy; never held while dialing
	lru       *simplelru.LRU[string, *entry]
	closed    bool
	retiredBy map[string]int64

	wg          sync.WaitGroup // retire goroutines and the janitor
	stopJanitor context.CancelFunc
	// shutdown is closed by Close: retiring entries stop waiting for their
	// grace period, since the server in front has already drained.
	shutdown chan struct{}

	counters
}

// New returns a running pool; call Close to release it. A Config that
// Validate refuses is refused here too.
func New(opts Config) (*Pool, error) { return newWithClock(opts, clock.RealClock{}) }

func newWithClock(opts Config, clk clock.WithTicker) (*Pool, error) {
	if err := errors.Join(opts.Validate()...); err != nil {
		return nil, fmt.Errorf("pool: %w", err)
	}
	// Eviction is done by hand before Add so the reason can be recorded.
	l, err := simplelru.NewLRU[string, *entry](opts.Capacity, nil)
	if err != nil {
		return nil, fmt.Errorf("pool: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pool{
		opts:        opts,
		clock:       clk,
		start:       clk.Now(),
		lru:         l,
		retiredBy:   make(map[string]int64),
		stopJanitor: cancel,
		shutdown:    make(chan struct{}),
	}
	if every := opts.sweepEvery(); every > 0 {
		p.wg.Add(1)
		go p.janitor(ctx, p.clock.NewTicker(every)) // sweeps are due from now
	}
	return p, nil
}

// now is a monotonic clock reading, immune to wall-clock jumps.
func (p *Pool) now() int64 { return int64(p.clock.Since(p.start)) }

// Acquire returns a lease on t.Cluster's entry, creating the entry if needed
// (cheap: no dialing) or replacing it when t's fingerprint changed; the old
// one is retired with reason "rotated". The lock is held only for map work.
// Acquire keeps no reference to t (an entry copies what it needs), so t may
// live in a caller's per-request allocation. Each lease allocates its
// Lease: leasing into one the caller owns (AcquireInto) saved a proxied GET
// one of 190 allocations, 16 of about 20,000 bytes and about 0.2 µs of at
// least 230 µs (pkg/proxy's BenchmarkProxyGateway and
// BenchmarkServePieces/record-lease, side by side), under the 2% it had
// to buy, so it was cut.
func (p *Pool) Acquire(t *Target) (*Lease, error) {
	l := new(Lease)
	if err := p.acquire(l, t); err != nil {
		return nil, err
	}
	return l, nil
}

// acquire is Acquire into l, a zero Lease.
func (p *Pool) acquire(l *Lease, t *Target) error {
	// Steady state: the same Target as the live entry's, no hashing.
	if ok, err := p.acquireSame(l, t); ok {
		return err
	}
	if err := t.validate(); err != nil {
		return err
	}
	if err := p.checkLiterals(t); err != nil {
		return err
	}
	fp := t.Fingerprint()

	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	if e, ok := p.lru.Get(t.Cluster); ok && e.fp == fp {
		e.lease(l, p.now())
		p.mu.Unlock()
		return nil
	}
	p.mu.Unlock()

	// Parse keys and build transports outside the lock.
	ne, err := p.newEntry(t, fp)
	if err != nil {
		return err
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if e, ok := p.lru.Get(t.Cluster); ok {
		if e.fp == fp {
			// Another Acquire built the same entry first; ne has no
			// connections or goroutines and is dropped.
			e.lease(l, p.now())
			return nil
		}
		p.lru.Remove(t.Cluster)
		p.retireLocked(e, ReasonRotated)
	} else if p.lru.Len() >= p.opts.Capacity {
		if _, old, ok := p.lru.RemoveOldest(); ok {
			p.retireLocked(old, ReasonEvicted)
		}
	}
	p.lru.Add(t.Cluster, ne)
	p.noteCreated()
	ne.lease(l, p.now())
	l.created = true
	return nil
}

// Remove retires cluster's entry, for reason (ReasonDeleted: the gateway is
// gone; ReasonRotated: it reaches its cluster differently now;
// ReasonUnusable: it cannot be used now, e.g. its credential Secret is gone). Live streams
// get the grace period like any retirement.
func (p *Pool) Remove(cluster, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.lru.Peek(cluster); ok {
		p.lru.Remove(cluster)
		p.retireLocked(e, reason)
	}
}

// RenewTunnelled has the next requests of entries that dial through a
// tunnel take new connections. A konnectivity proxy-server that misses a
// health check calls it: its tunnel takes no new dials from then on, but a
// pooled HTTP/2 connection riding it (shared with a watch, say) would still
// be given new requests, which would hang until the tunnel is given up.
// Each connection is marked not to be reused (and closed once its streams
// end; idle ones now), so a new request dials anew, through a tunnel that
// answers. Running streams stay: the tunnel's failure threshold decides
// about them. It costs each tunnelled cluster one new connection.
func (p *Pool) RenewTunnelled() {
	p.mu.Lock()
	entries := p.lru.Values()
	p.mu.Unlock()
	for _, e := range entries {
		if e.tunnelled {
			e.h2.renew()
			e.rt.CloseIdleConnections() // HTTP/1.1 ones, if any
		}
	}
}

// Len is the number of live (not retiring) entries.
func (p *Pool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lru.Len()
}

// Close retires every entry (reason "shutdown") and waits for the janitor and
// all retirements, which may take up to RetireGrace while streams run.
// Acquire fails afterwards. Close is idempotent.
func (p *Pool) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.shutdown)
		p.stopJanitor()
		for _, e := range p.lru.Values() {
			p.retireLocked(e, ReasonShutdown)
		}
		p.lru.Purge()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// checkLiterals applies the endpoint policy to the hosts as written before an
// entry is built: IP literals are judged, hosts that a forward proxy, an
// agent or a resolver could read as another address than netip does are
// refused (Secrets stored before the API refused them included), and names
// are judged where they are resolved. Every dial judges its address again
// (judgedDial, Control).
func (p *Pool) checkLiterals(t *Target) error {
	for _, u := range t.addresses() {
		if err := p.opts.Endpoints.CheckHost(u.Hostname()); err != nil {
			return fmt.Errorf("cluster %q address %s: %w", t.Cluster, u.Host, err)
		}
	}
	if t.ProxyURL != nil {
		if err := p.opts.Endpoints.CheckHost(t.ProxyURL.Hostname()); err != nil {
			return fmt.Errorf("cluster %q proxy %s: %w", t.Cluster, t.ProxyURL.Host, err)
		}
	}
	return nil
}
