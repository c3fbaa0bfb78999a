package konnectivity

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"k8s.io/utils/clock"
)

var (
	errNotStarted = errors.New("the konnectivity manager is not started")
	errStopped    = errors.New("the konnectivity manager is stopped")
)

// Manager owns one server (tunnel owner) per proxy-server address and the
// mTLS material they share. Readers (DialContext, ID) take locks only
// briefly; builds happen outside them.
type Manager struct {
	opts    Config
	metrics *Metrics
	clock   clock.WithTicker // reloads, health checks, rebuild backoff and grace periods; tests fake it

	servers []*server // one per address, in the order given
	next    atomic.Uint64

	mu         sync.Mutex
	material   *material // last good material; new tunnels are built from it
	started    bool
	stopped    bool
	cancel     context.CancelFunc
	done       <-chan struct{} // the Start context's Done
	rejectedID string          // digest of the last rejected content, so it is logged once

	tried     chan struct{} // closed once a tunnel is up or every server's first build ended
	triedOnce sync.Once
	triedN    atomic.Int32 // servers whose first build attempt ended

	wg       sync.WaitGroup
	stopOnce sync.Once

	dials, dialFailures, failovers, rejectedReloads atomic.Int64

	onMissedCheck atomic.Pointer[func(server string)] // see OnMissedCheck
}

// OnMissedCheck has fn called (in a goroutine of its own, which Stop waits
// for) when a tunnel first misses a health check, with its proxy-server's
// address: the pool has new requests take new connections then, so that
// they dial anew through a proxy-server that answers instead of waiting on
// one that went silent. Each proxy-server's tunnel calls it once per run of
// missed checks.
func (m *Manager) OnMissedCheck(fn func(server string)) { m.onMissedCheck.Store(&fn) }

// Stats are this Manager's counters (its metrics, see Metrics), summed
// over its proxy-servers; ServerStats has them per proxy-server.
type Stats struct {
	OpenTunnels         int64 // current plus retiring tunnels
	TunnelBuilds        int64 // build attempts, failed ones included
	TunnelBuildFailures int64
	HealthCheckFailures int64 // tunnels ended because their proxy-server did not answer
	Dials               int64
	DialFailures        int64
	Failovers           int64 // dials retried through another proxy-server after one failed
	Rotations           int64 // tunnels from new material that replaced older ones
	RejectedReloads     int64 // distinct unusable file contents ignored
	ProxyConnections    int64 // TCP connections grpc opened to the proxy-servers
	OpenProxyConns      int64 // of those, not closed yet
	UpTunnels           int64 // proxy-servers with a healthy tunnel taking dials
}

// New loads and validates the material; it fails if it is unusable now, or
// if the Config is refused by Validate.
func New(opts Config) (*Manager, error) { return newWithClock(opts, clock.RealClock{}) }

func newWithClock(opts Config, clk clock.WithTicker) (*Manager, error) {
	if !opts.Enabled() {
		return nil, errors.New("konnectivity: no proxy-server address; set --konnectivity-server-address")
	}
	if err := errors.Join(append(opts.Validate(), opts.validateShared()...)...); err != nil {
		return nil, fmt.Errorf("konnectivity: %w", err)
	}
	mat, err := loadMaterial(opts)
	if err != nil {
		return nil, fmt.Errorf("konnectivity: %w", err)
	}
	m := &Manager{opts: opts, clock: clk, material: mat, tried: make(chan struct{})}
	for _, addr := range opts.Addresses {
		m.servers = append(m.servers, newServer(m, addr))
	}
	m.metrics = newMetrics(m)
	return m, nil
}

// Metrics are the Manager's metrics, to register with the server's registry.
func (m *Manager) Metrics() *Metrics { return m.metrics }

// Start builds the tunnels in the background, checks their health and
// follows the files. Its goroutines end when ctx is cancelled or Stop is
// called; either closes all tunnels. Only the first call does anything.
func (m *Manager) Start(ctx context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started || m.stopped {
		return
	}
	m.started = true
	ctx, m.cancel = context.WithCancel(ctx)
	m.done = ctx.Done()
	for _, s := range m.servers {
		m.wg.Add(2)
		go s.rebuildLoop(ctx)
		go s.healthLoop(ctx, m.clock.NewTicker(m.opts.HealthInterval))
	}
	m.wg.Add(1)
	go m.reloadLoop(ctx, m.clock.NewTicker(m.opts.ReloadInterval)) // reloads are due from now
}

// Stop closes all tunnels and waits for every goroutine the Manager started.
// It is idempotent.
func (m *Manager) Stop() {
	m.stopOnce.Do(func() {
		m.mu.Lock()
		m.stopped = true
		cancel := m.cancel
		m.mu.Unlock()
		if cancel != nil {
			cancel()
		}
		m.wg.Wait()
		m.firstTried()
	})
}

// ID names the material of the tunnels that take new dials (of the newest
// good material while none is up). It changes when rotated tunnels take
// over, so pooled transports keyed on it move to the new tunnels.
func (m *Manager) ID() string {
	wanted := m.currentMaterial().id
	id := ""
	for _, s := range m.servers {
		if t, _ := s.healthy(); t != nil {
			if t.id == wanted {
				return wanted
			}
			if id == "" {
				id = t.id
			}
		}
	}
	if id == "" {
		return wanted
	}
	return id
}

func (m *Manager) currentMaterial() *material {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.material
}

// Stats returns this Manager's counters, summed over its proxy-servers.
func (m *Manager) Stats() Stats {
	st := Stats{
		Dials:           m.dials.Load(),
		DialFailures:    m.dialFailures.Load(),
		Failovers:       m.failovers.Load(),
		RejectedReloads: m.rejectedReloads.Load(),
	}
	for _, s := range m.servers {
		ss := s.stats()
		st.OpenTunnels += ss.OpenTunnels
		st.TunnelBuilds += ss.TunnelBuilds
		st.TunnelBuildFailures += ss.TunnelBuildFailures
		st.HealthCheckFailures += ss.HealthCheckFailures
		st.Rotations += ss.Rotations
		st.ProxyConnections += ss.ProxyConnections
		st.OpenProxyConns += ss.OpenProxyConns
		st.UpTunnels += ss.UpTunnels
	}
	return st
}

// ServerStats returns the counters of the proxy-server at addr (as given in
// Config.Addresses); the Manager-wide ones (dials, reloads) are zero.
func (m *Manager) ServerStats(addr string) (Stats, bool) {
	for _, s := range m.servers {
		if s.addr == addr {
			return s.stats(), true
		}
	}
	return Stats{}, false
}

// wake asks every server to compare its tunnel with the material.
func (m *Manager) wake() {
	for _, s := range m.servers {
		s.wake()
	}
}

// firstTried lets dials waiting for the first builds see their outcome.
func (m *Manager) firstTried() { m.triedOnce.Do(func() { close(m.tried) }) }

// serverTried counts a server's first build attempt.
func (m *Manager) serverTried() {
	if int(m.triedN.Add(1)) == len(m.servers) {
		m.firstTried()
	}
}

func (m *Manager) markStopped() {
	m.mu.Lock()
	m.stopped = true
	m.mu.Unlock()
}
