package konnectivity

import (
	"bytes"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// goroutineConn is a net.Conn (the tunnelled one, in these tests) that
// records which goroutine made each write, or fails writes once closed.
type goroutineConn struct {
	net.Conn
	mu      sync.Mutex
	writers []string
	written bytes.Buffer
	closed  bool
}

func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := strings.Cut(strings.TrimPrefix(string(buf), "goroutine "), " ")
	return id
}

func (c *goroutineConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	c.writers = append(c.writers, goroutineID())
	c.written.Write(p)
	return len(p), nil
}

func (c *goroutineConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	return nil
}

// Writes from many short-lived goroutines (as x/net's HTTP/2 client makes
// one per request) are all made on the connection's one sender goroutine,
// in order, and after Close on the caller's, failing as the connection does.
func TestTunnelledWritesShareOneGoroutine(t *testing.T) {
	inner := &goroutineConn{}
	c := newTrackedConn(inner, &tunnel{}, "10.0.0.1:6443")
	var callers []string
	for i := range 5 {
		done := make(chan string)
		go func() {
			if n, err := c.Write([]byte{byte('a' + i)}); n != 1 || err != nil {
				t.Errorf("write %d: %d, %v", i, n, err)
			}
			done <- goroutineID()
		}()
		callers = append(callers, <-done)
	}
	if got := inner.written.String(); got != "abcde" {
		t.Fatalf("the connection got %q, want abcde", got)
	}
	for i, w := range inner.writers {
		if w != inner.writers[0] {
			t.Fatalf("write %d was made on goroutine %s, write 0 on %s: want one sender goroutine", i, w, inner.writers[0])
		}
		if w == callers[i] {
			t.Fatalf("write %d was made on its caller's goroutine %s, not the sender's", i, w)
		}
	}
	_ = c.Close()
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a write after Close: %v, want the connection's net.ErrClosed", err)
	}
}

// A write that waits (its gRPC stream has no window left) holds up neither
// the other connections' writes nor its own connection's Close; the sender
// goroutine ends when the write returns (TestMain's goleak checks it).
func TestBlockedTunnelledWrite(t *testing.T) {
	blockedEnd, peer := net.Pipe() // a write waits until the peer reads
	blocked := newTrackedConn(blockedEnd, &tunnel{}, "10.0.0.1:6443")
	wrote := make(chan error, 1)
	go func() {
		_, err := blocked.Write([]byte("waits"))
		wrote <- err
	}()

	other := &goroutineConn{}
	oc := newTrackedConn(other, &tunnel{}, "10.0.0.2:6443")
	if _, err := oc.Write([]byte("goes on")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-wrote:
		t.Fatalf("the write without a reader returned early: %v", err)
	default:
	}

	closed := make(chan struct{})
	go func() {
		_ = blocked.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for a blocked write")
	}
	select {
	case err := <-wrote:
		if !errors.Is(err, io.ErrClosedPipe) {
			t.Fatalf("the blocked write ended with %v, want io.ErrClosedPipe", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the blocked write did not end when its connection closed")
	}
	_ = peer.Close()
	_ = oc.Close()
}
