package konnectivity

import (
	"errors"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	"k8s.io/component-base/metrics"

	"github.com/clustergateway/cluster-gateway/internal/testmetrics"
	"github.com/clustergateway/cluster-gateway/internal/testpoll"
)

// haStack is two proxy-servers with the agent connected to both, a Manager
// with a tunnel to each, its metrics, and a stream on each proxy-server.
type haStack struct {
	*stack
	m       *Manager
	reg     metrics.KubeRegistry
	streams map[string]*stream // by proxy-server address
	clean   func()
}

func newHAStack(t *testing.T) *haStack { return newHAStackWith(t, nil) }

// newHAStackWith is newHAStack with the Manager's Config changed by mutate.
func newHAStackWith(t *testing.T, mutate func(*Config)) *haStack {
	t.Helper()
	s := newStackN(t, 2)
	h := &haStack{stack: s, clean: leakCheck(t, s), reg: metrics.NewKubeRegistry(), streams: map[string]*stream{}}
	opts := s.config()
	opts.DialTimeout = time.Minute // so no success below can be a dial that waited that long
	if mutate != nil {
		mutate(&opts)
	}
	h.m = startManager(t, opts)
	h.m.Metrics().Register(h.reg)
	for _, a := range s.addresses() {
		h.waitUp(a, 1)
	}
	// Dials take the proxy-servers in turn: a few streams land on both.
	for range 4 {
		st := openStream(t, h.m, s)
		if h.streams[st.server] == nil {
			h.streams[st.server] = st
		} else {
			st.close()
		}
	}
	if len(h.streams) != 2 {
		t.Fatalf("streams went through %d proxy-servers, want both", len(h.streams))
	}
	return h
}

// finish stops the Manager and the streams, and checks that nothing is left.
func (h *haStack) finish() {
	h.m.Stop()
	for _, st := range h.streams {
		st.close()
	}
	h.clean()
}

// waitUp polls the gateway's metric tunnel_up for proxy-server addr.
func (h *haStack) waitUp(addr string, want float64) {
	h.t.Helper()
	name := fmt.Sprintf("cluster_gateway_konnectivity_tunnel_up{server=%q}", addr)
	testpoll.Eventually(h.t, 30*time.Second, fmt.Sprintf("%s = %v", name, want), func() error {
		got, err := testmetrics.Gather(h.reg)
		if err != nil {
			return err
		}
		if v, ok := got[name]; !ok || v != want {
			return fmt.Errorf("%s = %v (exported: %v)", name, v, ok)
		}
		return nil
	})
}

// serverDials is proxy-server i's count of dials it forwarded to an agent.
func (h *haStack) serverDials(i int) float64 {
	h.t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	m, err := testmetrics.Scrape(c, fmt.Sprintf("http://127.0.0.1:%d/metrics", h.servers[i].healthPort))
	if err != nil {
		h.t.Fatal(err)
	}
	return m.Sum("konnectivity_network_proxy_server_dial_duration_seconds_count") // none before its first dial
}

// requestsSucceed sends n requests, each on a new connection, and fails on
// the first that fails.
func (h *haStack) requestsSucceed(t *testing.T, n int, when string) {
	t.Helper()
	c := httpClient(h.m, h.stack)
	defer c.CloseIdleConnections()
	for i := range n {
		if err := get(c, h.stack); err != nil {
			t.Fatalf("%s: request %d of %d failed: %v", when, i+1, n, err)
		}
	}
}

// expectEnded waits for st to end with an error (not hang).
func expectEnded(t *testing.T, st *stream, why string) {
	t.Helper()
	select {
	case <-st.done:
		t.Logf("the stream on %s ended: %v", why, st.err)
	case <-time.After(30 * time.Second): // a hang, not a speed
		t.Fatalf("the stream on %s still runs", why)
	}
}

// A SIGKILLed proxy-server: its TCP connection closes, so every request
// from then on succeeds through the other one (none fails, none waits for
// the dial timeout), the stream on it ends with an error while the stream
// on the other one goes on, and once it is back its tunnel is rebuilt and
// carries dials again.
func TestKilledProxyServerFailsOver(t *testing.T) {
	h := newHAStack(t)
	dead, alive := h.addresses()[0], h.addresses()[1]
	h.requestsSucceed(t, 6, "both up")
	if h.serverDials(0) == 0 || h.serverDials(1) == 0 {
		t.Fatalf("dials per proxy-server %v and %v: both must carry dials", h.serverDials(0), h.serverDials(1))
	}

	h.killServer(0)
	h.requestsSucceed(t, 20, "one proxy-server killed")
	expectEnded(t, h.streams[dead], "the killed proxy-server")
	h.streams[alive].expectTicks(t, 5)
	h.waitUp(dead, 0)
	h.waitUp(alive, 1)
	if st, _ := h.m.ServerStats(dead); st.OpenProxyConns != 0 || h.proxyConnectionsTo(0) != 0 {
		t.Errorf("killed proxy-server: the Manager holds %d connections to it, the kernel sees %d; want 0", st.OpenProxyConns, h.proxyConnectionsTo(0))
	}

	h.startServer(0)
	h.waitReady()
	h.waitUp(dead, 1)
	if st, _ := h.m.ServerStats(dead); st.TunnelBuilds < 2 || h.proxyConnectionsTo(0) != 1 {
		t.Errorf("restarted proxy-server: %d builds, the kernel sees %d connections; want a rebuild and 1", st.TunnelBuilds, h.proxyConnectionsTo(0))
	}
	before := h.serverDials(0)
	h.requestsSucceed(t, 6, "after the restart")
	if h.serverDials(0) <= before {
		t.Errorf("the restarted proxy-server carried no dial")
	}
	h.streams[alive].expectTicks(t, 3)
	h.finish()
}

// A SIGSTOPped proxy-server keeps its connection open and answers nothing:
// the health check notices, its tunnel is closed (the stream on it ends with
// an error, the one on the other proxy-server goes on) and every request
// succeeds through the other one, without waiting for the dial timeout.
// After SIGCONT the tunnel is rebuilt and carries dials again.
func TestStoppedProxyServerFailsOver(t *testing.T) {
	h := newHAStack(t)
	frozen, alive := h.addresses()[0], h.addresses()[1]
	h.requestsSucceed(t, 4, "both up")
	pid := h.servers[0].cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })

	h.requestsSucceed(t, 20, "one proxy-server stopped")
	expectEnded(t, h.streams[frozen], "the stopped proxy-server")
	h.streams[alive].expectTicks(t, 5)
	h.waitUp(frozen, 0)
	if st, _ := h.m.ServerStats(frozen); st.HealthCheckFailures == 0 {
		t.Errorf("no health check failed for the stopped proxy-server: %+v", st)
	}
	h.requestsSucceed(t, 10, "the stopped proxy-server's tunnel closed")

	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	h.waitReady()
	h.waitUp(frozen, 1)
	testpoll.Eventually(t, 30*time.Second, "the resumed proxy-server carries dials", func() error {
		before := h.serverDials(0)
		h.requestsSucceed(t, 4, "after SIGCONT")
		if h.serverDials(0) <= before {
			return errors.New("no dial through it yet")
		}
		return nil
	})
	if st, _ := h.m.ServerStats(frozen); st.TunnelBuilds < 2 || st.OpenTunnels != 1 {
		t.Errorf("resumed proxy-server: want a rebuilt tunnel and one open; got %+v", st)
	}
	h.streams[alive].expectTicks(t, 3)
	h.finish()
}

// Rotated material on disk moves the tunnel to every proxy-server, each
// counted once in its own rotations.
func TestRotationMovesEveryTunnel(t *testing.T) {
	s := newStackN(t, 2)
	clean := leakCheck(t, s)
	m := startManager(t, s.config())
	expectStats(t, m, "a tunnel to each proxy-server", func(st Stats) bool { return st.UpTunnels == 2 })
	old := m.ID()
	s.rotateClientCert()
	for _, a := range s.addresses() {
		testpoll.Eventually(t, 20*time.Second, a+" rotated, its old tunnel closed", func() error {
			if st, _ := m.ServerStats(a); st.Rotations != 1 || st.OpenTunnels != 1 || st.UpTunnels != 1 {
				return fmt.Errorf("%+v", st)
			}
			return nil
		})
	}
	if m.ID() == old {
		t.Fatal("ID unchanged after every tunnel rotated")
	}
	if n := s.proxyConnections(); n != 2 {
		t.Fatalf("the kernel sees %d connections to the proxy-servers, want 2", n)
	}
	c := httpClient(m, s)
	for range 4 {
		if err := get(c, s); err != nil {
			t.Fatal(err)
		}
	}
	m.Stop()
	c.CloseIdleConnections()
	clean()
}

// The first dials wait for the first tunnel that is built, not for every
// first build: with one proxy-server silent from the start (its build waits
// for the dial timeout), requests go through the other at once.
func TestFirstDialsDoNotWaitForASilentProxyServer(t *testing.T) {
	s := newStackN(t, 2)
	clean := leakCheck(t, s)
	pid := s.servers[0].cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	opts := s.config()
	opts.DialTimeout = time.Minute // the silent one's build; no request below may wait that long
	m := startManager(t, opts)
	c := httpClient(m, s) // gives up after 20s
	for range 4 {
		if err := get(c, s); err != nil {
			t.Fatalf("with one proxy-server silent from the start: %v", err)
		}
	}
	if st, _ := m.ServerStats(s.addresses()[0]); st.UpTunnels != 0 {
		t.Fatalf("a tunnel to the stopped proxy-server is up: %+v", st)
	}
	m.Stop()
	c.CloseIdleConnections()
	clean()
}

// A proxy-server without the agent (one it has not reached yet, as right
// after a restart) answers dials with an error; the dial is tried on the
// next proxy-server, and every request succeeds.
func TestDialFailsOverToTheProxyServerWithTheAgent(t *testing.T) {
	s := newStackAgentOn(t, 2, []int{1})
	clean := leakCheck(t, s)
	m := startManager(t, s.config())
	expectStats(t, m, "a tunnel to each proxy-server", func(st Stats) bool { return st.UpTunnels == 2 })
	c := httpClient(m, s)
	for range 6 {
		if err := get(c, s); err != nil {
			t.Fatalf("with the agent on one proxy-server of two: %v", err)
		}
	}
	if st := m.Stats(); st.Failovers == 0 || st.DialFailures != 0 || st.UpTunnels != 2 {
		t.Fatalf("want dials failed over from the proxy-server without the agent, none failed, both tunnels up; got %+v", st)
	}
	m.Stop()
	c.CloseIdleConnections()
	clean()
}
