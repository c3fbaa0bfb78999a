package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
)

// The streams are client-go's, as kubectl's: tools/portforward and
// tools/remotecommand over WebSocket (-stream-protocol spdy: SPDY), and an
// HTTP/2 GET for `logs -f`.

// chunk is what the bench writes per call into a port-forward connection
// or exec's stdin (io.Copy's buffer size, as kubectl's copies use).
const chunk = 32 << 10

var payload = bytes.Repeat([]byte("0123456789abcdef"), chunk/16)

// forward is a running port-forward to port 80 of the bulk pod (the fake
// kubelet connects it to an echo server), listening on 127.0.0.1 like
// `kubectl port-forward`: one upgraded connection, a stream pair per local
// connection.
type forward struct {
	addr string
	stop chan struct{}
	done chan error
}

func startForward(ctx context.Context, p *streamPath) (*forward, error) {
	u, err := url.Parse(p.podURL("portforward"))
	if err != nil {
		return nil, err
	}
	dialer, err := portForwardDialer(p, u)
	if err != nil {
		return nil, err
	}
	f := &forward{stop: make(chan struct{}), done: make(chan error, 1)}
	ready := make(chan struct{})
	pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:80"}, f.stop, ready, io.Discard, logWriter{"port-forward over " + p.Name})
	if err != nil {
		return nil, err
	}
	go func() { f.done <- pf.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-f.done:
		return nil, fmt.Errorf("port-forward over %s: %w", p.Name, err)
	case <-time.After(childAnswer):
		close(f.stop)
		return nil, fmt.Errorf("port-forward over %s: not ready within %s", p.Name, childAnswer)
	case <-ctx.Done():
		close(f.stop)
		return nil, ctx.Err()
	}
	ports, err := pf.GetPorts()
	if err != nil {
		close(f.stop)
		return nil, err
	}
	f.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local)))
	return f, nil
}

// portForwardDialer dials the upgrade as -stream-protocol says.
func portForwardDialer(p *streamPath, u *url.URL) (httpstream.Dialer, error) {
	if *streamProtocol == "websocket" {
		return portforward.NewSPDYOverWebsocketDialer(u, p.cfg)
	}
	tr, upgrader, err := spdy.RoundTripperFor(p.cfg)
	if err != nil {
		return nil, err
	}
	return spdy.NewDialer(upgrader, &http.Client{Transport: tr}, http.MethodPost, u), nil
}

func (f *forward) close() {
	close(f.stop)
	select {
	case <-f.done:
	case <-time.After(childAnswer):
	}
}

// echo opens conns connections through the port-forward; on each it
// writes for d while reading the echo, then reads until everything written
// came back. It returns the MB written (each also came back) and the time
// until the last connection had read all of its bytes.
func (f *forward) echo(ctx context.Context, conns int, d time.Duration) (float64, time.Duration, error) {
	start := time.Now()
	var total atomic.Int64
	errs := make(chan error, conns)
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			n, err := echoConn(ctx, f.addr, start.Add(d))
			total.Add(n)
			errs <- err
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		if err != nil {
			return 0, 0, err
		}
	}
	return float64(total.Load()) / 1e6, elapsed, nil
}

// echoConn writes to one connection until stopAt and reads the echo until
// all of it came back; it returns the bytes written.
func echoConn(ctx context.Context, addr string, stopAt time.Time) (int64, error) {
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	// However slow a path, a stuck stream ends the measurement.
	hard := stopAt.Add(childAnswer)
	_ = c.SetDeadline(hard)
	var want atomic.Int64 // bytes written; -1 while writing
	want.Store(-1)
	go func() {
		var n int64
		for time.Now().Before(stopAt) && ctx.Err() == nil {
			m, err := c.Write(payload)
			n += int64(m)
			if err != nil {
				break
			}
		}
		want.Store(n)
		// Wakes a Read that waits for bytes that will not come because
		// it already has them all.
		_ = c.SetReadDeadline(time.Now())
	}()
	buf := make([]byte, chunk)
	var read int64
	for {
		if w := want.Load(); w >= 0 && read >= w {
			return w, nil
		}
		m, err := c.Read(buf)
		read += int64(m)
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && want.Load() >= 0 && time.Now().Before(hard) {
			_ = c.SetReadDeadline(hard)
			continue
		}
		return read, fmt.Errorf("port-forward: %d bytes came back, then: %w", read, err)
	}
}

// execCat runs `cat` in the bulk pod with stdin, writing stdin for d; it
// returns the MB that came back on stdout and the time from the first
// stdin read (the session is set up) until the session ended.
func execCat(ctx context.Context, p *streamPath, d time.Duration) (float64, time.Duration, error) {
	q := url.Values{"container": {localenv.BulkPod}, "command": {"cat"}, "stdin": {"true"}, "stdout": {"true"}}
	u, err := url.Parse(p.podURL("exec") + "?" + q.Encode())
	if err != nil {
		return 0, 0, err
	}
	ex, err := executor(p, u)
	if err != nil {
		return 0, 0, err
	}
	in := &timedSource{d: d}
	var out countingWriter
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: in, Stdout: &out}); err != nil {
		return 0, 0, fmt.Errorf("exec cat: %w", err)
	}
	first, sent := in.sent()
	elapsed := time.Since(first)
	if out.n != sent {
		return 0, 0, fmt.Errorf("exec cat: %d bytes on stdin, %d came back on stdout", sent, out.n)
	}
	return float64(out.n) / 1e6, elapsed, nil
}

// executor is an exec client as -stream-protocol says.
func executor(p *streamPath, u *url.URL) (remotecommand.Executor, error) {
	if *streamProtocol == "websocket" {
		return remotecommand.NewWebSocketExecutor(p.cfg, http.MethodGet, u.String())
	}
	return remotecommand.NewSPDYExecutor(p.cfg, http.MethodPost, u)
}

// timedSource is stdin that gives payload for d after its first Read, then
// EOF. remotecommand reads it in a goroutine it does not wait for: the
// fields are read under mu.
type timedSource struct {
	d     time.Duration
	mu    sync.Mutex
	first time.Time
	n     int64
}

func (s *timedSource) Read(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first.IsZero() {
		s.first = time.Now()
	}
	if time.Since(s.first) >= s.d {
		return 0, io.EOF
	}
	m := copy(b, payload)
	s.n += int64(m)
	return m, nil
}

// sent is the time of the first Read and the bytes given.
func (s *timedSource) sent() (time.Time, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first, s.n
}

type countingWriter struct{ n int64 }

func (w *countingWriter) Write(b []byte) (int, error) {
	w.n += int64(len(b))
	return len(b), nil
}

// followLogs follows the bulk container's log for d and returns the lines
// read and the time from the response's headers until the client left.
func followLogs(ctx context.Context, p *streamPath, d time.Duration) (float64, time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := getOK(ctx, p.logs, p.podURL("log")+"?container="+localenv.BulkPod+"&follow=true", "")
	if err != nil {
		return 0, 0, fmt.Errorf("logs -f: %w", err)
	}
	defer resp.Body.Close()
	start := time.Now()
	stopAt := start.Add(d)
	buf := make([]byte, chunk)
	var lines int
	for time.Now().Before(stopAt) {
		n, err := resp.Body.Read(buf)
		lines += bytes.Count(buf[:n], []byte{'\n'})
		if err != nil {
			return 0, 0, fmt.Errorf("logs -f ended after %d lines: %w", lines, err)
		}
	}
	return float64(lines), time.Since(start), nil
}

// logWriter logs what client-go's port-forward reports on its error output.
type logWriter struct{ what string }

func (w logWriter) Write(b []byte) (int, error) {
	logf("%s: %s", w.what, bytes.TrimSpace(b))
	return len(b), nil
}
