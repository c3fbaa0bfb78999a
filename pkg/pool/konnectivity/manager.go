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

// Manager owns the tunnel to one proxy-server. Readers (DialContext, ID)
// take mu only briefly; builds happen outside it.
type Manager struct {
	opts    Options
	metrics *Metrics
	clock   clock.WithTicker // reloads, rebuild backoff and grace periods; tests fake it

	mu         sync.Mutex
	material   *material // last good material; new tunnels are built from it
	current    *tunnel   // takes new dials; nil while none is healthy
	downCause  error     // why current is nil
	retiring   map[*tunnel]struct{}
	started    bool
	stopped    bool
	tried      chan struct{} // closed once the first build attempt ended
	triedOnce  sync.Once
	cancel     context.CancelFunc
	done       <-chan struct{} // the Start context's Done
	lastBuilt  string          // id of the last installed tunnel, to count rotations
	rejectedID string          // digest of the last rejected content, so it is logged once

	kick     chan struct{} // wakes the rebuild loop
	wg       sync.WaitGroup
	stopOnce sync.Once

	openTunnels, builds, buildFailures, dials, dialFailures atomic.Int64
	rotations, rejectedReloads, proxyConns                  atomic.Int64
	openProxyConns                                          atomic.Int64
}

// Stats are this Manager's counters (its metrics, see Metrics).
type Stats struct {
	OpenTunnels         int64 // current plus retiring tunnels
	TunnelBuilds        int64 // build attempts, failed ones included
	TunnelBuildFailures int64
	Dials               int64
	DialFailures        int64
	Rotations           int64 // tunnels from new material that replaced older ones
	RejectedReloads     int64 // distinct unusable file contents ignored
	ProxyConnections    int64 // TCP connections grpc opened to the proxy-server
	OpenProxyConns      int64 // of those, not closed yet
}

// New loads and validates the material; it fails if it is unusable now, or
// if the options are refused by Validate.
func New(opts Options) (*Manager, error) { return newWithClock(opts, clock.RealClock{}) }

func newWithClock(opts Options, clk clock.WithTicker) (*Manager, error) {
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
	m := &Manager{
		opts:      opts,
		clock:     clk,
		material:  mat,
		downCause: errors.New("no tunnel built yet"),
		retiring:  map[*tunnel]struct{}{},
		tried:     make(chan struct{}),
		kick:      make(chan struct{}, 1),
	}
	m.metrics = newMetrics(m)
	return m, nil
}

// Metrics are the Manager's metrics, to register with the server's registry.
func (m *Manager) Metrics() *Metrics { return m.metrics }

// Start builds the tunnel in the background and follows the files. Its
// goroutines end when ctx is cancelled or Stop is called; either closes all
// tunnels. Only the first call does anything.
func (m *Manager) Start(ctx context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started || m.stopped {
		return
	}
	m.started = true
	ctx, m.cancel = context.WithCancel(ctx)
	m.done = ctx.Done()
	m.wg.Add(2)
	go m.rebuildLoop(ctx)
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

// ID names the material of the tunnel that takes new dials (of the newest
// good material while none is up). It changes when a rotated tunnel takes
// over, so pooled transports keyed on it move to the new tunnel.
func (m *Manager) ID() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.current != nil {
		return m.current.id
	}
	return m.material.id
}

// Stats returns this Manager's counters.
func (m *Manager) Stats() Stats {
	return Stats{
		OpenTunnels:         m.openTunnels.Load(),
		TunnelBuilds:        m.builds.Load(),
		TunnelBuildFailures: m.buildFailures.Load(),
		Dials:               m.dials.Load(),
		DialFailures:        m.dialFailures.Load(),
		Rotations:           m.rotations.Load(),
		RejectedReloads:     m.rejectedReloads.Load(),
		ProxyConnections:    m.proxyConns.Load(),
		OpenProxyConns:      m.openProxyConns.Load(),
	}
}

func (m *Manager) wake() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}
