package pool

import (
	"errors"
	"net/http"
	"testing"
)

// A probe of a cluster with no live entry leaves the pool as it was: no
// entry, no counted dial or connection, and its connection closed.
func TestProbeWithoutEntryIsTransient(t *testing.T) {
	u := newUpstream(t)
	p := newTestPool(t, Config{Capacity: 2})
	tg := u.target(t, "c0", "prober")

	err := p.Probe(tg, func(rt http.RoundTripper) error {
		_, body := mustGet(t, rt, u.url, "/hello")
		if body != "HTTP/2.0 prober" {
			t.Errorf("probe got %q, want the cluster's answer over HTTP/2 with the client certificate", body)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	if st.Live != 0 || st.Created != 0 || st.Dials != 0 || st.OpenConns != 0 || st.ActiveStreams != 0 {
		t.Errorf("after a probe: %+v, want an untouched pool", st)
	}
	if u.accepted.Load() != 1 {
		t.Errorf("the cluster accepted %d connections, want 1", u.accepted.Load())
	}
	eventually(t, "the probe's connection to close", func() bool { return u.closed.Load() == 1 })

	// fn's error is Probe's.
	boom := errors.New("boom")
	if err := p.Probe(tg, func(http.RoundTripper) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("Probe returned %v, want fn's error", err)
	}
}

// A probe of a cluster with a live entry of the same shape shares its
// connection and moves neither its place in the LRU nor its idleness.
func TestProbeSharesLiveEntryQuietly(t *testing.T) {
	u := newUpstream(t)
	p := newTestPool(t, Config{Capacity: 2})
	c0, c1, c2 := u.target(t, "c0", "client"), u.target(t, "c1", "client"), u.target(t, "c2", "client")
	for _, tg := range []*Target{c0, c1} {
		l := acquire(t, p, tg)
		mustGet(t, l.Transport(), u.url, "/hello")
		l.Release()
	}
	p.mu.Lock()
	e0, _ := p.lru.Peek("c0")
	p.mu.Unlock()
	lastUsed, accepted, before := e0.lastUsed.Load(), u.accepted.Load(), p.Stats()

	if err := p.Probe(c0, func(rt http.RoundTripper) error {
		if !e0.idle() {
			return nil
		}
		t.Error("the entry looked idle while a probe used it; the janitor could retire it under the probe")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := p.Probe(c0, func(rt http.RoundTripper) error {
		mustGet(t, rt, u.url, "/hello")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := u.accepted.Load(); got != accepted {
		t.Errorf("the probe opened %d new connections, want it to share the entry's", got-accepted)
	}
	if e0.lastUsed.Load() != lastUsed {
		t.Error("the probe refreshed the entry's idleness")
	}
	if after := p.Stats(); after.Created != before.Created || after.Dials != before.Dials || after.ActiveStreams != 0 {
		t.Errorf("stats moved from %+v to %+v", before, after)
	}
	// c0 is still the least recently used: a new cluster evicts it.
	acquire(t, p, c2).Release()
	p.mu.Lock()
	_, has0 := p.lru.Peek("c0")
	_, has1 := p.lru.Peek("c1")
	p.mu.Unlock()
	if has0 || !has1 {
		t.Errorf("after a probe of c0 and a new cluster: c0 live %v, c1 live %v; want c0 evicted", has0, has1)
	}
}

func TestProbeRefusals(t *testing.T) {
	u := newUpstream(t)
	p := mustNew(t, Config{Capacity: 2})
	called := false
	fn := func(http.RoundTripper) error { called = true; return nil }
	if err := p.Probe(&Target{Cluster: "bad"}, fn); err == nil {
		t.Error("a target without an address was probed")
	}
	p.Close()
	if err := p.Probe(u.target(t, "c0", "client"), fn); !errors.Is(err, ErrClosed) {
		t.Errorf("Probe after Close: %v, want ErrClosed", err)
	}
	if called {
		t.Error("fn ran for a refused probe")
	}
}
