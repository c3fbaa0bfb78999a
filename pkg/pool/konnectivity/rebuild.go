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

// rebuildLoop keeps one healthy tunnel to the proxy-server built from the
// newest good material.
func (s *server) rebuildLoop(ctx context.Context) {
	defer s.m.wg.Done()
	defer s.shutdown()
	backoff := rebuildBackoff()
	for ctx.Err() == nil {
		mat := s.wanted()
		if mat == nil {
			select {
			case <-ctx.Done():
			case <-s.kick:
			}
			continue
		}
		t, err := s.build(ctx, mat)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.buildFailed(err)
			s.tried(false)
			timer := s.m.clock.NewTimer(backoff.Step())
			select {
			case <-ctx.Done():
			case <-timer.C():
			}
			timer.Stop()
			continue
		}
		backoff = rebuildBackoff()
		s.install(ctx, t)
		s.tried(true)
	}
}

// wanted drops a dead current tunnel and returns the material to build a
// tunnel from, or nil when the current one is healthy and up to date.
func (s *server) wanted() *material {
	mat := s.m.currentMaterial()
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.current; t != nil {
		if dead, lost, cause := t.health(); dead {
			s.current = nil
			s.downCause = cause
			grace := s.m.opts.RetireGrace
			if lost {
				grace = 0 // its gRPC connection is gone or silent, and with it every conn
			}
			s.retireLocked(t, grace)
			klog.InfoS("Konnectivity tunnel is down; rebuilding", "proxyServer", s.addr, "cause", cause)
		}
	}
	if s.current != nil && s.current.id == mat.id {
		return nil
	}
	return mat
}

// build dials the proxy-server and completes the TLS handshake; no lock is
// held, so dials on the current tunnel go on meanwhile.
func (s *server) build(ctx context.Context, mat *material) (*tunnel, error) {
	s.builds.Add(1)
	t := newTunnel(mat.id, s.addr, s.wake, func() { s.openTunnels.Add(-1) })
	bctx, cancel := context.WithTimeout(ctx, s.m.opts.DialTimeout)
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
		s.proxyConns.Add(1)
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		s.openProxyConns.Add(1)
		wc := &watchedConn{Conn: c, t: t, onClose: func() { s.openProxyConns.Add(-1) }}
		t.setProxyConn(wc)
		return wc, nil
	}
	creds := failFastCreds{TransportCredentials: credentials.NewTLS(mat.tlsConfig()), onFailure: func(error) { cancel() }, noteErr: t.noteConnErr}
	//nolint:staticcheck // WithBlock & co. make the build report TLS and connect errors instead of deferring them to the first dial.
	rt, err := client.CreateGRPCTunnel(bctx, s.addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(dialer),
		grpc.WithBlock(),
		grpc.WithReturnConnectionError(),
		grpc.FailOnNonTempDialError(true),
		grpc.WithIdleTimeout(0), // an idle tunnel must stay up, not look lost
		// A last resort behind the health check (health.go). The
		// proxy-server enforces grpc's default policy (pings at most every
		// 5 min, none without streams), so stay above it or be cut off.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 6 * time.Minute, Timeout: 30 * time.Second}),
		grpc.WithStreamInterceptor(t.captureClientConn),
	)
	if err != nil {
		s.buildFailures.Add(1)
		return nil, fmt.Errorf("connecting to proxy-server %s: %w", s.addr, err)
	}
	t.rt = rt
	s.openTunnels.Add(1)
	t.holdClientConn(s.m.opts.DialTimeout)
	t.arm()
	return t, nil
}

func (s *server) buildFailed(err error) {
	s.mu.Lock()
	if s.current == nil {
		s.downCause = err
	}
	s.mu.Unlock()
	klog.ErrorS(err, "Building the konnectivity tunnel failed; retrying with backoff (check that the proxy-server is up, that the CA file verifies its serving certificate and that it trusts the client certificate)", "proxyServer", s.addr)
}

// install makes t take new dials and retires the tunnel it replaces.
func (s *server) install(ctx context.Context, t *tunnel) {
	if ctx.Err() != nil {
		t.close() // stopping: nobody may dial through it
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.current
	s.current, s.downCause = t, nil
	if old != nil {
		s.retireLocked(old, s.m.opts.RetireGrace)
	}
	if s.lastBuilt != "" && s.lastBuilt != t.id {
		s.rotations.Add(1)
		klog.InfoS("Konnectivity tunnel rotated to new material", "proxyServer", s.addr, "id", t.id, "previous", s.lastBuilt)
	} else {
		klog.V(2).InfoS("Konnectivity tunnel built", "proxyServer", s.addr, "id", t.id)
	}
	s.lastBuilt = t.id
}

// retireLocked stops t taking dials; it is closed once its last live conn
// closes, after grace (from now), or at shutdown, whichever comes first.
func (s *server) retireLocked(t *tunnel, grace time.Duration) {
	if _, ok := s.retiring[t]; ok {
		return
	}
	s.retiring[t] = struct{}{}
	t.retired.Store(true)
	done := s.m.done
	var timer clock.Timer
	if grace > 0 {
		timer = s.m.clock.NewTimer(grace)
	}
	s.m.wg.Add(1)
	go func() {
		defer s.m.wg.Done()
		if timer != nil {
		wait:
			for t.live.Load() > 0 {
				select {
				case <-t.idle: // recheck: a late dial may have raced the retirement
				case <-timer.C():
					klog.V(2).InfoS("Closing retired konnectivity tunnel after its grace period", "proxyServer", s.addr, "id", t.id, "liveConns", t.live.Load())
					break wait
				case <-done:
					break wait
				}
			}
			timer.Stop()
		}
		t.close()
		s.mu.Lock()
		delete(s.retiring, t)
		s.mu.Unlock()
	}()
}

// shutdown runs when the rebuild loop ends: no tunnel takes dials any more.
func (s *server) shutdown() {
	s.m.markStopped()
	s.mu.Lock()
	t := s.current
	s.current, s.downCause = nil, errStopped
	s.mu.Unlock()
	s.m.firstTried() // a dial waiting for the first build sees "stopped" now
	if t != nil {
		t.close()
	}
}
