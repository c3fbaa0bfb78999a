package pool

import (
	"net/url"
	"testing"
)

// Acquire's fast path must never take a changed Target for the entry's: every
// change that moves the fingerprint also breaks the shape, including a change
// made in place in the caller's buffers after the entry was built.
func TestShapeMatchesOnlyTheSameTarget(t *testing.T) {
	base := func() *Target {
		return &Target{
			Cluster:    "c1",
			Address:    &url.URL{Scheme: "https", Host: "10.0.0.1:6443"},
			CAData:     []byte("ca"),
			ServerName: "api",
			CertData:   []byte("cert"),
			KeyData:    []byte("key"),
			ProxyURL:   &url.URL{Scheme: "socks5", Host: "p:1080"},
			Tunnel:     &countingDialer{},
			TunnelID:   "t1",
		}
	}
	if s := shapeOf(base()); !s.same(base()) {
		t.Fatal("an equal target does not match its shape")
	}
	for name, mutate := range map[string]func(*Target){
		"cluster":       func(t *Target) { t.Cluster = "c2" },
		"address":       func(t *Target) { t.Address = &url.URL{Scheme: "https", Host: "10.0.0.2:6443"} },
		"no address":    func(t *Target) { t.Address = nil },
		"ca":            func(t *Target) { t.CAData = []byte("ca2") },
		"no ca":         func(t *Target) { t.CAData = nil },
		"server name":   func(t *Target) { t.ServerName = "api2" },
		"insecure":      func(t *Target) { t.Insecure = true },
		"cert":          func(t *Target) { t.CertData = []byte("cert2") },
		"key":           func(t *Target) { t.KeyData = []byte("key2") },
		"proxy":         func(t *Target) { t.ProxyURL = &url.URL{Scheme: "socks5", Host: "q:1080"} },
		"no proxy":      func(t *Target) { t.ProxyURL = nil },
		"tunnel id":     func(t *Target) { t.TunnelID = "t2" },
		"no tunnel":     func(t *Target) { t.Tunnel = nil },
		"ca in place":   func(t *Target) { t.CAData[0] = 'X' },
		"key in place":  func(t *Target) { t.KeyData[0] = 'X' },
		"addr in place": func(t *Target) { t.Address.Host = "10.0.0.3:6443" },
	} {
		tg := base()
		s := shapeOf(tg) // taken from the very Target that is then changed
		mutate(tg)
		if tg.Fingerprint() == base().Fingerprint() {
			t.Fatalf("%s: test bug, the fingerprint did not change", name)
		}
		if s.same(tg) {
			t.Errorf("changing %s still matches the entry's shape", name)
		}
	}
}

// The fast path hands out the live entry, and a rotated Target still
// replaces it.
func TestAcquireFastPathAndRotation(t *testing.T) {
	u := newUpstream(t)
	p := newTestPool(t, Config{Capacity: 8})
	tg := u.target(t, "c1", "client-1")
	first := acquire(t, p, tg)
	first.Release()
	same := *tg // a copy sharing the caller's buffers, as pkg/proxy passes it
	l := acquire(t, p, &same)
	l.Release()
	if l.Fingerprint() != first.Fingerprint() || p.Stats().Created != 1 {
		t.Fatalf("the same target built a new entry: %+v", p.Stats())
	}
	rotated := u.target(t, "c1", "client-2")
	l = acquire(t, p, rotated)
	l.Release()
	if l.Fingerprint() == first.Fingerprint() || p.Stats().Created != 2 {
		t.Fatalf("a rotated target reused the entry: %+v", p.Stats())
	}
}
