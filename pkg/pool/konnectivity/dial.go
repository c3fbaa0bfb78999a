package konnectivity

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client"
	clientmetrics "sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client/metrics"
)

// DialContext dials addr through a healthy tunnel, within DialTimeout,
// taking the proxy-servers in turn. A dial that fails on one proxy-server
// is tried on the next healthy one. While no tunnel is healthy it fails at
// once (the rebuilds go on in the background), so callers can answer 503
// instead of hanging.
func (m *Manager) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	start := time.Now()
	m.dials.Add(1)
	c, err := m.dial(ctx, network, addr)
	m.metrics.dialDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		m.dialFailures.Add(1)
		return nil, err
	}
	return c, nil
}

func (m *Manager) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	switch network {
	case "tcp", "tcp4", "tcp6": // the tunnel speaks "tcp" only; the agent resolves
	default:
		return nil, fmt.Errorf("konnectivity tunnel cannot dial network %q to %s: only tcp is supported", network, addr)
	}
	// The agent resolves addr with its own rules (a cgo build reads 127.1
	// as 127.0.0.1): judge it as written, or refuse what cannot be judged.
	if err := m.opts.Endpoints.CheckHostPort(addr); err != nil {
		return nil, fmt.Errorf("konnectivity tunnel will not dial %s: %w", addr, err)
	}
	ctx, cancel := context.WithTimeout(ctx, m.opts.DialTimeout)
	defer cancel()
	tried := map[*server]bool{}
	var failed []error // each failed proxy-server's error, to report if all fail
	// Each server is tried once, plus one more try on a server whose
	// tunnel was retired (a rotation) between picking it and dialing.
	for retry := true; ; {
		s, t, err := m.pick(ctx, addr, tried)
		switch {
		case errors.Is(err, errAllTried):
			return nil, errors.Join(failed...)
		case err != nil:
			return nil, errors.Join(append(failed, err)...)
		}
		t.acquire()
		c, err := t.rt.DialContext(ctx, "tcp", addr)
		if err == nil {
			return newTrackedConn(c, t, addr), nil
		}
		t.release()
		if retry && ctx.Err() == nil && t.retired.Load() {
			retry = false
			continue
		}
		if tunnelBroken(err) {
			t.markDead(fmt.Errorf("opening a stream to proxy-server %s failed: %w", s.addr, err), false)
			err = downError(addr, err)
		} else {
			err = fmt.Errorf("dialing %s through konnectivity proxy-server %s: %w", addr, s.addr, err)
		}
		if ctx.Err() != nil {
			return nil, err
		}
		// Another proxy-server may still reach addr: this one may have
		// died meanwhile, or have no agent for addr (yet: agents connect
		// to a restarted proxy-server a moment after the gateway does).
		tried[s] = true
		failed = append(failed, err)
		m.failovers.Add(1)
	}
}

// pick returns a healthy server not in skip and its tunnel, taking them in
// turn. Before the first builds have ended it waits for them (within ctx);
// afterwards it never waits.
func (m *Manager) pick(ctx context.Context, addr string, skip map[*server]bool) (*server, *tunnel, error) {
	for waited := false; ; waited = true {
		m.mu.Lock()
		started, stopped := m.started, m.stopped
		m.mu.Unlock()
		switch {
		case stopped:
			return nil, nil, fmt.Errorf("cannot dial %s: %w", addr, errStopped)
		case !started:
			return nil, nil, fmt.Errorf("cannot dial %s: %w", addr, errNotStarted)
		}
		first := int(m.next.Add(1))
		var causes []error
		for i := range m.servers {
			s := m.servers[(first+i)%len(m.servers)]
			if skip[s] {
				continue
			}
			t, cause := s.healthy()
			if t != nil {
				return s, t, nil
			}
			causes = append(causes, cause)
		}
		if len(causes) == 0 && len(skip) > 0 {
			return nil, nil, errAllTried
		}
		if waited || len(skip) > 0 {
			return nil, nil, downError(addr, errors.Join(causes...))
		}
		select {
		case <-m.tried:
		case <-ctx.Done():
			return nil, nil, downError(addr, fmt.Errorf("the first tunnel builds have not finished: %w", ctx.Err()))
		}
	}
}

var errAllTried = errors.New("every proxy-server was tried")

// tunnelBroken tells failures of the tunnel itself (rebuild it) from
// failures of one dial (the agent could not reach addr, timeouts).
func tunnelBroken(err error) bool {
	ok, reason := client.GetDialFailureReason(err)
	return ok && (reason == clientmetrics.DialFailureStreamSetup || reason == clientmetrics.DialFailureTunnelClosed)
}

func downError(addr string, cause error) error {
	if cause == nil {
		cause = errors.New("no healthy tunnel")
	}
	return fmt.Errorf("konnectivity tunnel to %s is down: %w; retrying", addr, cause)
}
