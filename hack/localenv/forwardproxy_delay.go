package localenv

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// StartDelayingProxy starts another HTTP CONNECT proxy, like HTTPProxy, whose
// tunnels hand on everything the destination sends delay after it arrived:
// a cluster behind it answers every request at least delay late, like a far
// or overloaded one, without a bound on its throughput. Stop closes it.
func (e *Env) StartDelayingProxy(delay time.Duration) (*ForwardProxy, error) {
	if delay <= 0 {
		return nil, fmt.Errorf("delaying proxy: the delay must be positive, not %v", delay)
	}
	e.mu.Lock()
	n := len(e.delayingProxies)
	e.mu.Unlock()
	p, err := e.newForwardProxyLogging("http", fmt.Sprintf("forward-proxy-delaying-%d", n))
	if err != nil {
		return nil, err
	}
	p.delay = delay
	serveHTTPConnect(p)
	e.mu.Lock()
	e.delayingProxies = append(e.delayingProxies, p)
	e.mu.Unlock()
	return p, nil
}

// Delayed is how many chunks from destinations went through the delay line.
func (p *ForwardProxy) Delayed() int64 { return p.delayed.Load() }

// delayLine is a connection whose reads return what the peer sent delay
// after it arrived: a reader goroutine stamps each chunk, Read waits for the
// stamp plus delay. Order and content are kept; Close stops the reader.
type delayLine struct {
	net.Conn
	delay   time.Duration
	count   *atomic.Int64
	chunks  chan stamped
	closed  chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
	pending []byte
	err     error
}

type stamped struct {
	b   []byte
	at  time.Time
	err error
}

func newDelayLine(c net.Conn, delay time.Duration, count *atomic.Int64) *delayLine {
	d := &delayLine{Conn: c, delay: delay, count: count, chunks: make(chan stamped, 256), closed: make(chan struct{})}
	d.wg.Add(1)
	go d.pump()
	return d
}

func (d *delayLine) pump() {
	defer d.wg.Done()
	for {
		buf := make([]byte, 32<<10)
		n, err := d.Conn.Read(buf)
		if n > 0 {
			select {
			case d.chunks <- stamped{b: buf[:n], at: time.Now()}:
			case <-d.closed:
				return
			}
		}
		if err != nil {
			select {
			case d.chunks <- stamped{err: err, at: time.Now()}:
			case <-d.closed:
			}
			return
		}
	}
}

func (d *delayLine) Read(p []byte) (int, error) {
	if len(d.pending) == 0 {
		if d.err != nil {
			return 0, d.err
		}
		var c stamped
		select {
		case c = <-d.chunks:
		case <-d.closed:
			return 0, net.ErrClosed
		}
		t := time.NewTimer(time.Until(c.at.Add(d.delay)))
		select {
		case <-t.C:
		case <-d.closed:
			t.Stop()
			return 0, net.ErrClosed
		}
		if c.err != nil {
			d.err = c.err
			return 0, c.err
		}
		d.count.Add(1)
		d.pending = c.b
	}
	n := copy(p, d.pending)
	d.pending = d.pending[n:]
	return n, nil
}

// Close closes the connection and waits for the reader goroutine.
func (d *delayLine) Close() error {
	err := d.Conn.Close()
	d.once.Do(func() { close(d.closed) })
	d.wg.Wait()
	return err
}
