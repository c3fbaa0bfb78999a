package health

import "sync"

// Subscription tells a watcher which clusters' Reachable status changed.
// Changes coalesce per cluster: a slow watcher never blocks the prober and
// never misses that a cluster changed, only how often.
type Subscription struct {
	p       *Prober
	mu      sync.Mutex
	changed map[string]struct{}
	signal  chan struct{}
}

// Subscribe starts a subscription; Close ends it.
func (p *Prober) Subscribe() *Subscription {
	s := &Subscription{p: p, changed: map[string]struct{}{}, signal: make(chan struct{}, 1)}
	p.mu.Lock()
	p.watches[s] = struct{}{}
	p.mu.Unlock()
	return s
}

// Changed is signalled when Take has something to return.
func (s *Subscription) Changed() <-chan struct{} { return s.signal }

// Take returns the clusters that changed since the last Take.
func (s *Subscription) Take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.changed))
	for name := range s.changed {
		out = append(out, name)
	}
	clear(s.changed)
	return out
}

// Close ends the subscription.
func (s *Subscription) Close() {
	s.p.mu.Lock()
	delete(s.p.watches, s)
	s.p.mu.Unlock()
}

func (p *Prober) notify(name string) {
	p.mu.RLock()
	subs := make([]*Subscription, 0, len(p.watches))
	for s := range p.watches {
		subs = append(subs, s)
	}
	p.mu.RUnlock()
	for _, s := range subs {
		s.mu.Lock()
		s.changed[name] = struct{}{}
		s.mu.Unlock()
		select {
		case s.signal <- struct{}{}:
		default:
		}
	}
}
