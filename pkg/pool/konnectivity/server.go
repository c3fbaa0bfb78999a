package konnectivity

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// server owns the tunnels to one proxy-server: the current one, which takes
// new dials, and retiring ones; it builds, health-checks, retires and closes
// them. Its Manager owns it and shares the material with its peers.
type server struct {
	m    *Manager
	addr string

	mu        sync.Mutex
	current   *tunnel // takes new dials; nil while none is healthy
	downCause error   // why current is nil
	retiring  map[*tunnel]struct{}
	lastBuilt string // id of the last installed tunnel, to count rotations

	kick      chan struct{} // wakes the rebuild loop
	triedOnce sync.Once

	openTunnels, builds, buildFailures, healthFailures atomic.Int64
	rotations, proxyConns, openProxyConns              atomic.Int64
}

func newServer(m *Manager, addr string) *server {
	return &server{
		m: m, addr: addr,
		downCause: fmt.Errorf("no tunnel to proxy-server %s built yet", addr),
		retiring:  map[*tunnel]struct{}{},
		kick:      make(chan struct{}, 1),
	}
}

// healthy returns the tunnel that takes new dials, or why there is none
// (naming the proxy-server).
func (s *server) healthy() (*tunnel, error) {
	s.mu.Lock()
	t, cause := s.current, s.downCause
	s.mu.Unlock()
	if t == nil {
		return nil, cause
	}
	dead, _, why := t.health()
	if !dead {
		return t, nil
	}
	s.wake()
	return nil, why
}

func (s *server) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// tried records the end of a build attempt: a tunnel up ends the Manager's
// wait for the first builds at once; failures end it once every server has
// had its first attempt.
func (s *server) tried(up bool) {
	if up {
		s.m.firstTried()
	}
	s.triedOnce.Do(s.m.serverTried)
}

func (s *server) stats() Stats {
	st := Stats{
		OpenTunnels:         s.openTunnels.Load(),
		TunnelBuilds:        s.builds.Load(),
		TunnelBuildFailures: s.buildFailures.Load(),
		HealthCheckFailures: s.healthFailures.Load(),
		Rotations:           s.rotations.Load(),
		ProxyConnections:    s.proxyConns.Load(),
		OpenProxyConns:      s.openProxyConns.Load(),
	}
	if t, _ := s.healthy(); t != nil {
		st.UpTunnels = 1
	}
	return st
}
