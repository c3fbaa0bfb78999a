package pool

import (
	"bufio"
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// stream is a long-running GET /watch on one lease, read by a goroutine
// that the test owns and waits for.
type stream struct {
	lines   atomic.Int64
	lastAt  atomic.Int64 // when the last line arrived, in UnixNano
	cancel  context.CancelFunc
	body    func() error
	done    chan struct{}
	endedAt time.Time // valid after done
	err     error     // valid after done
}

func startStream(t *testing.T, rt http.RoundTripper, u *upstream) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.url.String()+"/watch", nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		cancel()
		t.Fatalf("start watch: %v", err)
	}
	if resp.ProtoMajor != 2 {
		t.Errorf("watch went over %s, want HTTP/2", resp.Proto)
	}
	s := &stream{cancel: cancel, body: resp.Body.Close, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			s.lastAt.Store(time.Now().UnixNano())
			s.lines.Add(1)
		}
		s.endedAt = time.Now()
		s.err = sc.Err()
	}()
	t.Cleanup(s.stop)
	eventually(t, "first watch lines", func() bool { return s.lines.Load() >= 3 })
	return s
}

// stop ends the stream from the client side and waits for its reader.
func (s *stream) stop() {
	s.cancel()
	_ = s.body()
	<-s.done
}

// lastLine is when the stream last delivered a line.
func (s *stream) lastLine() time.Time { return time.Unix(0, s.lastAt.Load()) }

func (s *stream) ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// keepsStreaming waits until s delivers three more lines, and fails at once
// if it ends first.
func keepsStreaming(t *testing.T, s *stream, when string) {
	t.Helper()
	before := s.lines.Load()
	eventually(t, "the watch to deliver "+when, func() bool {
		if s.ended() {
			t.Fatalf("the watch ended %s: %v", when, s.err)
		}
		return s.lines.Load() >= before+3
	})
}
