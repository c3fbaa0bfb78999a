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

// DialContext dials addr through the current tunnel, within DialTimeout.
// While no tunnel is healthy it fails at once (the rebuild goes on in the
// background), so callers can answer 503 instead of hanging.
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
	// A second try covers a tunnel retired between picking it and dialing.
	for try := 0; ; try++ {
		t, err := m.pick(ctx, addr)
		if err != nil {
			return nil, err
		}
		t.acquire()
		c, err := t.rt.DialContext(ctx, "tcp", addr)
		if err == nil {
			return newTrackedConn(c, t, addr), nil
		}
		t.release()
		if try == 0 && ctx.Err() == nil && t.retired.Load() {
			continue
		}
		if tunnelBroken(err) {
			t.markDead(fmt.Errorf("opening a stream to proxy-server %s failed: %w", m.opts.Address, err), false)
			return nil, downError(addr, err)
		}
		return nil, fmt.Errorf("dialing %s through konnectivity proxy-server %s: %w", addr, m.opts.Address, err)
	}
}

// pick returns the tunnel for new dials. Before the first build attempt has
// ended it waits for it (within ctx); afterwards it never waits.
func (m *Manager) pick(ctx context.Context, addr string) (*tunnel, error) {
	for waited := false; ; waited = true {
		m.mu.Lock()
		t, cause, started, stopped := m.current, m.downCause, m.started, m.stopped
		m.mu.Unlock()
		switch {
		case stopped:
			return nil, fmt.Errorf("cannot dial %s: %w", addr, errStopped)
		case !started:
			return nil, fmt.Errorf("cannot dial %s: %w", addr, errNotStarted)
		}
		if t != nil {
			dead, _, why := t.health()
			if !dead {
				return t, nil
			}
			cause = why
			m.wake()
		}
		if waited {
			return nil, downError(addr, cause)
		}
		select {
		case <-m.tried:
		case <-ctx.Done():
			return nil, downError(addr, fmt.Errorf("the first tunnel build has not finished: %w", ctx.Err()))
		}
	}
}

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
