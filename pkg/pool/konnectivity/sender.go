package konnectivity

import (
	"net"
	"sync"
)

// sender makes a tunnelled connection's writes on a long-lived goroutine of
// the connection's own. A write on a tunnelled connection is a gRPC message:
// konnectivity-client marshals it with protobuf and hands it to gRPC, a deep
// call on top of the writer's stack. The HTTP/2 client writes each request
// from a new goroutine (x/net's, one per request), whose small stack was
// copied to grow at that depth on every request (4-8% of the CPU in the
// profiles of the gateway and of BenchmarkTunnelledRequest); the sender's
// stack grows once. One per connection, not per tunnel: each connection is
// its own gRPC stream with its own flow control, and a write that waits for
// its stream's window must not hold up the others.
type sender struct {
	c    net.Conn
	mu   sync.Mutex // one write at a time
	work chan []byte
	res  chan sendResult
	stop chan struct{}
	once sync.Once
}

type sendResult struct {
	n   int
	err error
}

// start starts the goroutine that writes on c, until halted.
func (s *sender) start(c net.Conn) {
	s.c = c
	s.work, s.res, s.stop = make(chan []byte), make(chan sendResult, 1), make(chan struct{})
	go s.run()
}

func (s *sender) run() {
	for {
		select {
		case p := <-s.work:
			n, err := s.c.Write(p)
			s.res <- sendResult{n, err}
		case <-s.stop:
			return
		}
	}
}

// write writes p on the connection on the sender's goroutine, or on the
// caller's once the sender is stopped.
func (s *sender) write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case s.work <- p:
		r := <-s.res
		return r.n, r.err
	case <-s.stop:
		return s.c.Write(p)
	}
}

// halt ends the goroutine: at once if it is idle, else when the write it
// is making returns (closing the connection ends it).
func (s *sender) halt() { s.once.Do(func() { close(s.stop) }) }
