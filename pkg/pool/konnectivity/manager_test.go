package konnectivity

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/component-base/metrics"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
	"github.com/clustergateway/cluster-gateway/internal/testpoll"
)

// Many dials share ONE gRPC connection (one TLS handshake) to the
// proxy-server, each reaching the managed cluster with its certificate
// verified through the tunnel; Stop releases everything.
func TestManyDialsShareOneTunnel(t *testing.T) {
	s := newStack(t)
	clean := leakCheck(t, s)
	m := startManager(t, s.config())
	// Registered as the server does, before any dial: metrics record from then on.
	reg := metrics.NewKubeRegistry()
	m.Metrics().Register(reg)
	c := httpClient(m, s)

	const workers, perWorker = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*perWorker)
	for range workers {
		wg.Go(func() {
			for range perWorker {
				errs <- get(c, s)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	st := m.Stats()
	if st.TunnelBuilds != 1 || st.ProxyConnections != 1 || st.OpenTunnels != 1 || st.Dials != workers*perWorker || st.DialFailures != 0 {
		t.Fatalf("want 1 build, 1 proxy connection, 1 open tunnel, %d dials, 0 failures; got %+v", workers*perWorker, st)
	}
	if n := s.proxyConnections(); n != 1 || st.OpenProxyConns != 1 {
		t.Fatalf("kernel sees %d TCP connections to the proxy-server, the Manager %d open; want 1", n, st.OpenProxyConns)
	}
	// The proxy-server saw every stream end: closed conns free their streams.
	testpoll.Eventually(t, 15*time.Second, "proxy-server has no established connections left", func() error {
		n, err := s.serverMetric("konnectivity_network_proxy_server_established_connections")
		if err == nil && n != 0 {
			err = fmt.Errorf("%v established", n)
		}
		return err
	})
	expectMetrics(t, reg, map[string]float64{
		"cluster_gateway_konnectivity_open_tunnels":                1,
		"cluster_gateway_konnectivity_tunnel_builds_total":         1,
		"cluster_gateway_konnectivity_proxy_connections":           1,
		"cluster_gateway_konnectivity_dial_duration_seconds_count": workers * perWorker,
	})

	m.Stop()
	m.Stop() // idempotent
	if _, err := m.DialContext(context.Background(), "tcp", s.backendAddr); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Fatalf("dial after Stop: want a 'stopped' error, got %v", err)
	}
	if st := m.Stats(); st.OpenTunnels != 0 || st.OpenProxyConns != 0 {
		t.Fatalf("after Stop: %d open tunnels, %d open proxy connections; want 0", st.OpenTunnels, st.OpenProxyConns)
	}
	testpoll.Eventually(t, 10*time.Second, "no TCP connection to the proxy-server", func() error {
		if n := s.proxyConnections(); n != 0 {
			return fmt.Errorf("%d left", n)
		}
		return nil
	})
	c.CloseIdleConnections()
	clean()
}

// A rotated client cert/key moves new dials to a new tunnel while a stream
// on the old one keeps working until the grace period ends. The Manager runs
// on a fake clock: the stream is seen working right after the rotation, half
// way through the grace and just before its end on the Manager's clock,
// however long the machine takes to show it, and nothing but the clock can
// end the grace.
func TestRotateClientCertKeepsLiveStreamsUntilGrace(t *testing.T) {
	const grace = 3 * time.Second
	s := newStack(t)
	clean := leakCheck(t, s)
	opts := s.config()
	opts.RetireGrace = grace
	clk := testingclock.NewFakeClock(time.Now())
	m := startManagerWithClock(t, opts, clk)
	old := m.ID()
	st := openStream(t, m, s)

	// The Manager sees the new files at its next reload and retires the old
	// tunnel; its grace starts then, on the Manager's clock.
	s.rotateClientCert()
	timers := clk.Waiters() // the reload ticker
	clk.Step(opts.ReloadInterval)
	testpoll.Eventually(t, 10*time.Second, "tunnel identity changes", func() error {
		if m.ID() == old {
			return errors.New("still the old ID")
		}
		return nil
	})
	if n := clk.Waiters() - timers; n != 1 {
		t.Fatalf("the rotation set %d timers on the Manager's clock, want the retired tunnel's grace", n)
	}
	if err := get(httpClient(m, s), s); err != nil {
		t.Fatalf("dial on the new tunnel: %v", err)
	}
	if got := m.Stats(); got.Rotations != 1 || got.TunnelBuilds != 2 || got.OpenTunnels != 2 {
		t.Fatalf("want 1 rotation, 2 builds, 2 open tunnels (old one retiring); got %+v", got)
	}
	if n := s.proxyConnections(); n != 2 {
		t.Fatalf("kernel sees %d connections to the proxy-server, want 2 (old tunnel still serving)", n)
	}

	// The old tunnel carries the stream through the grace period (it still
	// delivers at its start, half way and just before its end) and closes
	// it once the grace is over.
	st.expectTicks(t, 3)
	clk.Step(grace / 2)
	st.expectTicks(t, 3)
	clk.Step(grace/2 - time.Nanosecond)
	if n := clk.Waiters() - timers; n != 1 {
		t.Fatalf("the grace timer fired before the %v grace was over", grace)
	}
	st.expectTicks(t, 3)
	if got := m.Stats(); got.OpenTunnels != 2 {
		t.Fatalf("the retired tunnel closed before its grace was over: %+v", got)
	}
	clk.Step(time.Nanosecond)
	select {
	case <-st.done:
		t.Logf("stream on the retired tunnel ended: %v", st.err)
	case <-time.After(30 * time.Second): // a hang, not a speed
		t.Fatal("stream on the retired tunnel was not closed once the grace period was over")
	}
	expectStats(t, m, "retired tunnel closed", func(s Stats) bool { return s.OpenTunnels == 1 })
	if err := get(httpClient(m, s), s); err != nil {
		t.Fatal(err)
	}
	m.Stop()
	st.close()
	clean()
}

// A rotated CA moves new dials too; a retired tunnel whose last connection
// closes is closed at once, not at the end of its grace. A CA that does not
// verify the proxy-server is refused by TLS and the old tunnel keeps serving.
func TestRotateCA(t *testing.T) {
	s := newStack(t)
	clean := leakCheck(t, s)
	m := startManager(t, s.config()) // grace: a minute
	first := m.ID()
	st := openStream(t, m, s)
	if n, err := s.serverMetric("konnectivity_network_proxy_server_established_connections"); err != nil || n != 1 {
		t.Fatalf("proxy-server established connections: %v, %v; want the stream's 1", n, err)
	}

	other := testpki.MustCA(t, "unrelated-ca")
	writeFile(t, s.caFile, append(append([]byte{}, s.serverCA.CertPEM...), other.CertPEM...))
	testpoll.Eventually(t, 10*time.Second, "tunnel identity changes", func() error {
		if m.ID() == first {
			return errors.New("still the first ID")
		}
		return nil
	})
	bundle := m.ID()
	if got := m.Stats(); got.Rotations != 1 || got.OpenTunnels != 2 {
		t.Fatalf("want 1 rotation and the old tunnel retiring; got %+v", got)
	}
	st.expectTicks(t, 3)
	st.close()
	expectStats(t, m, "retired tunnel closed once its last conn closed", func(s Stats) bool { return s.OpenTunnels == 1 })

	failures := m.Stats().TunnelBuildFailures
	writeFile(t, s.caFile, other.CertPEM)
	expectStats(t, m, "a build with the wrong CA fails", func(s Stats) bool { return s.TunnelBuildFailures > failures })
	if id := m.ID(); id != bundle {
		t.Fatalf("ID changed to %s although no tunnel could be built from the wrong CA", id)
	}
	if err := get(httpClient(m, s), s); err != nil {
		t.Fatalf("the last good tunnel must keep serving: %v", err)
	}

	writeFile(t, s.caFile, s.serverCA.CertPEM)
	testpoll.Eventually(t, 15*time.Second, "back on the first material", func() error {
		if id := m.ID(); id != first {
			return fmt.Errorf("ID %s", id)
		}
		return nil
	})
	if err := get(httpClient(m, s), s); err != nil {
		t.Fatal(err)
	}
	m.Stop()
	clean()
}

// Empty, garbage, mismatched or missing files change nothing: they are
// counted once each, and the tunnel and its identity stay.
func TestUnusableFilesChangeNothing(t *testing.T) {
	s := newStack(t)
	clean := leakCheck(t, s)
	m := startManager(t, s.config())
	id := m.ID()
	c := httpClient(m, s)
	if err := get(c, s); err != nil {
		t.Fatal(err)
	}
	_, otherKey := issue(t, s.clientCA, "other")
	goodKey, _ := os.ReadFile(s.keyFile)
	cases := []struct {
		name, path string
		data       []byte // nil: remove the file
	}{
		{"empty CA", s.caFile, []byte{}},
		{"garbage CA", s.caFile, []byte("not a certificate")},
		{"key as CA", s.caFile, goodKey},
		{"corrupt CA", s.caFile, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")},
		{"garbage cert", s.certFile, []byte("garbage")},
		{"mismatched key", s.keyFile, otherKey},
		{"missing key", s.keyFile, nil},
	}
	for i, tc := range cases {
		good, _ := os.ReadFile(tc.path)
		if tc.data == nil {
			if err := os.Remove(tc.path); err != nil {
				t.Fatal(err)
			}
		} else {
			writeFile(t, tc.path, tc.data)
		}
		want := int64(i + 1)
		expectStats(t, m, tc.name+" rejected", func(s Stats) bool { return s.RejectedReloads >= want })
		time.Sleep(5 * s.config().ReloadInterval) // unchanged bad content is not counted again
		if got := m.Stats(); got.RejectedReloads != want || got.TunnelBuilds != 1 || got.Rotations != 0 {
			t.Fatalf("%s: want %d rejections, 1 build, no rotation; got %+v", tc.name, want, got)
		}
		if m.ID() != id {
			t.Fatalf("%s: ID changed", tc.name)
		}
		if err := get(c, s); err != nil {
			t.Fatalf("%s: the last good tunnel must keep serving: %v", tc.name, err)
		}
		writeFile(t, tc.path, good)
	}
	time.Sleep(5 * s.config().ReloadInterval)
	if got := m.Stats(); got.TunnelBuilds != 1 || got.Rotations != 0 || m.ID() != id {
		t.Fatalf("restoring the good files must change nothing; got %+v", got)
	}
	m.Stop()
	c.CloseIdleConnections()
	clean()
}

// With the proxy-server killed, dials fail fast with a clear error instead
// of waiting for DialTimeout; once it is back they succeed again.
func TestProxyServerRestart(t *testing.T) {
	s := newStack(t)
	clean := leakCheck(t, s)
	opts := s.config()
	opts.DialTimeout = time.Minute // so a failure seen below cannot be a timeout
	m := startManager(t, opts)
	c := httpClient(m, s)
	if err := get(c, s); err != nil {
		t.Fatal(err)
	}

	s.killServer(0)
	testpoll.Eventually(t, 10*time.Second, "dials fail fast", func() error {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		conn, err := m.DialContext(ctx, "tcp", s.backendAddr)
		if err == nil {
			conn.Close()
			return errors.New("dial still succeeds")
		}
		if !strings.Contains(err.Error(), "konnectivity tunnel to "+s.backendAddr+" is down") || errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("not the fail-fast error: %w", err)
		}
		t.Logf("fail-fast error: %v", err)
		return nil
	})
	if err := get(c, s); err == nil {
		t.Fatal("request succeeded with the proxy-server down")
	}

	s.startServer(0)
	s.waitReady()
	testpoll.Eventually(t, 20*time.Second, "dials succeed again", func() error { return get(c, s) })
	if got := m.Stats(); got.OpenTunnels != 1 || got.TunnelBuilds < 2 {
		t.Fatalf("want one open tunnel after the rebuild; got %+v", got)
	}
	if n := s.proxyConnections(); n != 1 {
		t.Fatalf("kernel sees %d connections to the proxy-server, want 1", n)
	}
	m.Stop()
	c.CloseIdleConnections()
	clean()
}

// Cancelling Start's context ends the Manager like Stop does.
func TestContextCancelStops(t *testing.T) {
	s := newStack(t)
	clean := leakCheck(t, s)
	m, err := New(s.config())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.DialContext(context.Background(), "tcp", s.backendAddr); err == nil || !strings.Contains(err.Error(), "not started") {
		t.Fatalf("dial before Start: want a 'not started' error, got %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.Start(ctx)
	if err := get(httpClient(m, s), s); err != nil {
		t.Fatal(err)
	}
	cancel()
	expectStats(t, m, "tunnel closed on cancel", func(s Stats) bool { return s.OpenTunnels == 0 })
	if _, err := m.DialContext(context.Background(), "tcp", s.backendAddr); err == nil {
		t.Fatal("dial after cancel succeeded")
	}
	m.Stop()
	clean()
}

// A client cert the proxy-server does not trust (valid as a file) cannot
// build a tunnel: the build fails and the last good tunnel keeps serving.
func TestUntrustedClientCertKeepsOldTunnel(t *testing.T) {
	s := newStack(t)
	clean := leakCheck(t, s)
	m := startManager(t, s.config())
	id := m.ID()
	c := httpClient(m, s)
	if err := get(c, s); err != nil {
		t.Fatal(err)
	}
	cert, key := issue(t, testpki.MustCA(t, "untrusted-ca"), "intruder")
	writeFile(t, s.keyFile, key)
	writeFile(t, s.certFile, cert)
	expectStats(t, m, "builds with the untrusted cert fail", func(s Stats) bool { return s.TunnelBuildFailures >= 2 })
	if m.ID() != id {
		t.Fatal("ID changed although no tunnel was built")
	}
	if err := get(c, s); err != nil {
		t.Fatalf("the last good tunnel must keep serving: %v", err)
	}
	if got := m.Stats(); got.OpenTunnels != 1 || got.Rotations != 0 {
		t.Fatalf("want the old tunnel alone; got %+v", got)
	}
	m.Stop()
	c.CloseIdleConnections()
	clean()
}
