package konnectivity

import (
	"context"
	"fmt"
	"math"
	"net"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client"
)

// rebuildBackoff spaces failed builds; capped low so a restarted
// proxy-server is back in use within seconds.
func rebuildBackoff() wait.Backoff {
	return wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: math.MaxInt32, Cap: 3 * time.Second}
}

// rebuildLoop keeps one healthy tunnel built from the newest good material.
func (m *Manager) rebuildLoop(ctx context.Context) {
	defer m.wg.Done()
	defer m.shutdown()
	backoff := rebuildBackoff()
	for ctx.Err() == nil {
		mat := m.wanted()
		if mat == nil {
			select {
			case <-ctx.Done():
			case <-m.kick:
			}
			continue
		}
		t, err := m.build(ctx, mat)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			m.buildFailed(err)
			m.firstTried()
			timer := m.clock.NewTimer(backoff.Step())
			select {
			case <-ctx.Done():
			case <-timer.C():
			}
			timer.Stop()
			continue
		}
		backoff = rebuildBackoff()
		m.install(ctx, t)
		m.firstTried()
	}
}

// firstTried lets dials waiting for the first build see its outcome.
func (m *Manager) firstTried() { m.triedOnce.Do(func() { close(m.tried) }) }

// wanted drops a dead current tunnel and returns the material to build a
// tunnel from, or nil when the current one is healthy and up to date.
func (m *Manager) wanted() *material {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t := m.current; t != nil {
		if dead, lost, cause := t.health(); dead {
			m.current = nil
			m.downCause = cause
			grace := m.opts.RetireGrace
			if lost {
				grace = 0 // its gRPC connection is gone, and with it every conn
			}
			m.retireLocked(t, grace)
			klog.InfoS("Konnectivity tunnel is down; rebuilding", "proxyServer", m.opts.Address, "cause", cause)
		}
	}
	if m.current != nil && m.current.id == m.material.id {
		return nil
	}
	return m.material
}

// build dials the proxy-server and completes the TLS handshake; no lock is
// held, so dials on the current tunnel go on meanwhile.
func (m *Manager) build(ctx context.Context, mat *material) (*tunnel, error) {
	m.builds.Add(1)
	t := newTunnel(mat.id, m.opts.Address, m.wake, func() { m.openTunnels.Add(-1) })
	bctx, cancel := context.WithTimeout(ctx, m.opts.DialTimeout)
	defer cancel()
	// One TCP connection per tunnel: a second call of the dialer means the
	// first connection failed (e.g. the server refused our client cert after
	// the handshake) or was lost later. Our backoff, not grpc's, paces
	// retries, and a lost tunnel stays down until it is replaced.
	var attempts atomic.Int32
	dialer := func(ctx context.Context, addr string) (net.Conn, error) {
		if attempts.Add(1) > 1 {
			cancel()
			return nil, fmt.Errorf("the connection attempt failed: %w", t.connError())
		}
		m.proxyConns.Add(1)
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		m.openProxyConns.Add(1)
		wc := &watchedConn{Conn: c, t: t, onClose: func() { m.openProxyConns.Add(-1) }}
		t.setProxyConn(wc)
		return wc, nil
	}
	creds := failFastCreds{TransportCredentials: credentials.NewTLS(mat.tlsConfig()), onFailure: func(error) { cancel() }, noteErr: t.noteConnErr}
	//nolint:staticcheck // WithBlock & co. make the build report TLS and connect errors instead of deferring them to the first dial.
	rt, err := client.CreateGRPCTunnel(bctx, m.opts.Address,
		grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(dialer),
		grpc.WithBlock(),
		grpc.WithReturnConnectionError(),
		grpc.FailOnNonTempDialError(true),
		grpc.WithIdleTimeout(0), // an idle tunnel must stay up, not look lost
		// Notice a silently dead proxy-server while streams are open. The
		// proxy-server enforces grpc's default policy (pings at most every
		// 5 min, none without streams), so stay above it or be cut off.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 6 * time.Minute, Timeout: 30 * time.Second}),
	)
	if err != nil {
		m.buildFailures.Add(1)
		return nil, fmt.Errorf("connecting to proxy-server %s: %w", m.opts.Address, err)
	}
	t.rt = rt
	m.openTunnels.Add(1)
	t.arm()
	return t, nil
}

func (m *Manager) buildFailed(err error) {
	m.mu.Lock()
	if m.current == nil {
		m.downCause = err
	}
	m.mu.Unlock()
	klog.ErrorS(err, "Building the konnectivity tunnel failed; retrying with backoff (check that the proxy-server is up, that the CA file verifies its serving certificate and that it trusts the client certificate)", "proxyServer", m.opts.Address)
}

// install makes t take new dials and retires the tunnel it replaces.
func (m *Manager) install(ctx context.Context, t *tunnel) {
	if ctx.Err() != nil {
		t.close() // stopping: nobody may dial through it
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.current
	m.current, m.downCause = t, nil
	if old != nil {
		m.retireLocked(old, m.opts.RetireGrace)
	}
	if m.lastBuilt != "" && m.lastBuilt != t.id {
		m.rotations.Add(1)
		klog.InfoS("Konnectivity tunnel rotated to new material", "proxyServer", m.opts.Address, "id", t.id, "previous", m.lastBuilt)
	} else {
		klog.V(2).InfoS("Konnectivity tunnel built", "proxyServer", m.opts.Address, "id", t.id)
	}
	m.lastBuilt = t.id
}

// retireLocked stops t taking dials; it is closed once its last live conn
// closes, after grace (from now), or at shutdown, whichever comes first.
func (m *Manager) retireLocked(t *tunnel, grace time.Duration) {
	if _, ok := m.retiring[t]; ok {
		return
	}
	m.retiring[t] = struct{}{}
	t.retired.Store(true)
	done := m.done
	var timer clock.Timer
	if grace > 0 {
		timer = m.clock.NewTimer(grace)
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		if timer != nil {
		wait:
			for t.live.Load() > 0 {
				select {
				case <-t.idle: // recheck: a late dial may have raced the retirement
				case <-timer.C():
					klog.V(2).InfoS("Closing retired konnectivity tunnel after its grace period", "id", t.id, "liveConns", t.live.Load())
					break wait
				case <-done:
					break wait
				}
			}
			timer.Stop()
		}
		t.close()
		m.mu.Lock()
		delete(m.retiring, t)
		m.mu.Unlock()
	}()
}

// shutdown runs when the rebuild loop ends: no tunnel takes dials any more.
func (m *Manager) shutdown() {
	m.mu.Lock()
	m.stopped = true
	t := m.current
	m.current, m.downCause = nil, errStopped
	m.mu.Unlock()
	m.firstTried() // a dial waiting for the first build sees "stopped" now
	if t != nil {
		t.close()
	}
}
