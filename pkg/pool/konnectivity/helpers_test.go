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

	"github.com/clustergateway/cluster-gateway/internal/testpoll"
	"github.com/clustergateway/cluster-gateway/internal/testproc"
)

func startManager(t testing.TB, opts Options) *Manager {
	t.Helper()
	m, err := New(opts)
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
// its reader goroutine reports each line and finally the error that ended it.
type stream struct {
	conn   net.Conn
	lines  chan string
	ended  chan error
	lastAt atomic.Int64 // when the last line arrived, in UnixNano
	endAt  atomic.Int64 // when reading failed, in UnixNano
	wg     sync.WaitGroup
}

// lastLine is when the stream last delivered a line; endedAt when it ended.
func (st *stream) lastLine() time.Time { return time.Unix(0, st.lastAt.Load()) }
func (st *stream) endedAt() time.Time  { return time.Unix(0, st.endAt.Load()) }

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
	st := &stream{conn: conn, lines: make(chan string, 1024), ended: make(chan error, 1)}
	st.wg.Add(1)
	go func() {
		defer st.wg.Done()
		r := bufio.NewReader(conn)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				st.endAt.Store(time.Now().UnixNano())
				st.ended <- err
				return
			}
			st.lastAt.Store(time.Now().UnixNano())
			select {
			case st.lines <- line:
			default: // nobody is counting right now
			}
		}
	}()
	t.Cleanup(st.close)
	st.expectTicks(t, 3)
	return st
}

// expectTicks waits for n more lines of the stream.
func (st *stream) expectTicks(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-st.lines:
		case err := <-st.ended:
			t.Fatalf("stream ended: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatal("stream stalled")
		}
	}
}

func (st *stream) close() {
	st.conn.Close()
	st.wg.Wait()
}

// leakCheck records goroutines and fds now; the returned func, called after
// Stop, waits until both are back to that baseline.
func leakCheck(t *testing.T) func() {
	t.Helper()
	goroutines := goleak.IgnoreCurrent()
	fds := testproc.MustOpenFDs(t)
	return func() {
		t.Helper()
		testpoll.Eventually(t, 15*time.Second, "open fds back to baseline", func() error {
			if n := testproc.MustOpenFDs(t); n > fds {
				return fmt.Errorf("%d open, baseline %d", n, fds)
			}
			return nil
		})
		goleak.VerifyNone(t, goroutines)
	}
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
