package proxy

import (
	"io"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// streams are the proxy's live watches and upgrades, so that a shutting-down
// gateway ends them the way a cluster would instead of cutting them.
type streams struct {
	mu       sync.Mutex
	draining bool
	watches  map[io.Closer]struct{}
	upgrades int
	idle     chan struct{} // closed when upgrades drops to 0 while draining
}

func newStreams() *streams { return &streams{watches: map[io.Closer]struct{}{}} }

// addWatch tracks a watch's upstream body; the returned func untracks it. A
// watch that starts while draining is ended at once.
func (s *streams) addWatch(body io.Closer) func() {
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		_ = body.Close()
		return func() {}
	}
	s.watches[body] = struct{}{}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.watches, body)
		s.mu.Unlock()
	}
}

func (s *streams) upgradeStarted() {
	s.mu.Lock()
	s.upgrades++
	s.mu.Unlock()
}

func (s *streams) upgradeEnded() {
	s.mu.Lock()
	s.upgrades--
	if s.upgrades == 0 && s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
	s.mu.Unlock()
}

// Drain ends every proxied watch cleanly now (its upstream body is closed,
// which the watch path turns into a normal end of the response: clients
// re-watch, from another replica), and waits up to timeout for upgraded
// streams (exec, attach, port-forward) to end on their own. What is still
// open then is cut when the pool closes. Watches that start afterwards end
// at once. The gateway calls it on shutdown, after its shutdown delay.
func (p *Proxy) Drain(timeout time.Duration) {
	s := p.streams
	s.mu.Lock()
	s.draining = true
	bodies := make([]io.Closer, 0, len(s.watches))
	for b := range s.watches {
		bodies = append(bodies, b)
	}
	var idle chan struct{}
	if s.upgrades > 0 {
		idle = make(chan struct{})
		s.idle = idle
	}
	upgrades := s.upgrades
	s.mu.Unlock()
	for _, b := range bodies {
		_ = b.Close()
	}
	klog.InfoS("Draining proxied streams for shutdown", "watchesEnded", len(bodies), "upgradesOpen", upgrades, "upgradeDrain", timeout)
	if idle == nil {
		return
	}
	select {
	case <-idle:
	case <-time.After(timeout):
		klog.InfoS("Upgraded streams still open after the drain; they end when the pool closes", "timeout", timeout)
	}
}
