package konnectivity

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/utils/clock"

	"github.com/clustergateway/cluster-gateway/internal/testpoll"
	"github.com/clustergateway/cluster-gateway/internal/testproc"
)

func startManager(t testing.TB, opts Config) *Manager {
	t.Helper()
	return startManagerWithClock(t, opts, clock.RealClock{})
}

// startManagerWithClock is startManager on clk: with a fake clock, files
// are re-read, failed builds retried and grace periods over only as the
// test steps it.
func startManagerWithClock(t testing.TB, opts Config, clk clock.WithTicker) *Manager {
	t.Helper()
	m, err := newWithClock(opts, clk)
	if err != nil {
		t.Fatal(err)
	}
	m.Start(context.Background())
	t.Cleanup(m.Stop)
	return m
}

// httpClient sends every request on a new connection through the tunnel.
func httpClient(m *Manager, s *stack) *http.Client {
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		DialContext: m.DialContext, TLSClientConfig: s.backendTLS(), DisableKeepAlives: true,
	}}
}

func get(c *http.Client, s *stack) error {
	resp, err := c.Get("https://" + s.backendAddr + "/")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		return fmt.Errorf("backend answered %s %q", resp.Status, body)
	}
	return nil
}

// stream is a long-lived request (like a watch) on one tunnel connection;
// its reader goroutine counts the lines and finally records the error that
// ended it.
type stream struct {
	conn   net.Conn
	server string        // the proxy-server it went through
	lines  atomic.Int64  // lines so far
	line   chan struct{} // a wake-up after a line (capacity 1: not a count)
	done   chan struct{} // closed once reading failed
	err    error         // why reading failed; valid once done is closed
	wg     sync.WaitGroup
}

func openStream(t *testing.T, m *Manager, s *stack) *stream {
	t.Helper()
	raw, err := m.DialContext(context.Background(), "tcp", s.backendAddr)
	if err != nil {
		t.Fatal(err)
	}
	conn := tls.Client(raw, s.backendTLS())
	if _, err := fmt.Fprintf(conn, "GET /stream HTTP/1.1\r\nHost: %s\r\n\r\n", s.backendAddr); err != nil {
		t.Fatal(err)
	}
	st := &stream{conn: conn, server: raw.(*trackedConn).t.proxyAddr, line: make(chan struct{}, 1), done: make(chan struct{})}
	st.wg.Add(1)
	go func() {
		defer st.wg.Done()
		r := bufio.NewReader(conn)
		for {
			if _, err := r.ReadString('\n'); err != nil {
				st.err = err
				close(st.done)
				return
			}
			st.lines.Add(1)
			select {
			case st.line <- struct{}{}:
			default: // a wake-up is pending already
			}
		}
	}()
	t.Cleanup(st.close)
	st.expectTicks(t, 3)
	return st
}

// expectTicks waits for n lines more than the stream had delivered when it
// was called, and fails if the stream ends first.
func (st *stream) expectTicks(t *testing.T, n int) {
	t.Helper()
	want := st.lines.Load() + int64(n)
	timeout := time.After(10 * time.Second) // a hang, not a speed
	for st.lines.Load() < want {
		select {
		case <-st.line:
		case <-st.done:
			if st.lines.Load() >= want {
				return
			}
			t.Fatalf("stream ended: %v", st.err)
		case <-timeout:
			t.Fatalf("stream stalled: %d of %d more lines", n-int(want-st.lines.Load()), n)
		}
	}
}

func (st *stream) close() {
	st.conn.Close()
	st.wg.Wait()
}

// leakCheck records goroutines and fds now; the returned func, called after
// Stop, waits until both are back to that baseline. The stack's balancer
// runs in this process too: its connections (the agent reconnecting) are
// not the Manager's.
func leakCheck(t *testing.T, s *stack) func() {
	t.Helper()
	goroutines := goleak.IgnoreCurrent()
	fds := testproc.MustOpenFDs(t) - s.balancerConns()
	return func() {
		t.Helper()
		testpoll.Eventually(t, 15*time.Second, "open fds back to baseline", func() error {
			if n := testproc.MustOpenFDs(t) - s.balancerConns(); n > fds {
				return fmt.Errorf("%d open besides the balancer's, baseline %d", n, fds)
			}
			return nil
		})
		goleak.VerifyNone(t, goroutines, goleak.IgnoreAnyFunction("github.com/clustergateway/cluster-gateway/internal/testbalancer.(*Balancer).pipe"))
	}
}

func (s *stack) balancerConns() int {
	if s.balancer == nil {
		return 0
	}
	return s.balancer.OpenConns()
}

func expectStats(t *testing.T, m *Manager, what string, ok func(Stats) bool) {
	t.Helper()
	testpoll.Eventually(t, 20*time.Second, what, func() error {
		if st := m.Stats(); !ok(st) {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
}
