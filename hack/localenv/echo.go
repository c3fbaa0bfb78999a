package localenv

import (
	"io"
	"net"
	"sync"
)

// EchoServer is a TCP listener on 127.0.0.1 that writes back what it reads,
// standing in for a container port behind port-forward.
type EchoServer struct {
	Addr string
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	open map[net.Conn]struct{}
}

func startEcho() (*EchoServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &EchoServer{Addr: ln.Addr().String(), ln: ln, open: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

func (s *EchoServer) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.open[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_, _ = io.Copy(c, c)
			c.Close()
			s.mu.Lock()
			delete(s.open, c)
			s.mu.Unlock()
		}()
	}
}

// Close stops accepting, closes open connections and waits for their goroutines.
func (s *EchoServer) Close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.open {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}
