package pool

import (
	"net/url"
	"testing"
)

// Every field that shapes the transport changes the fingerprint; the tunnel
// pointer does not (TunnelID is its identity).
func TestFingerprint(t *testing.T) {
	base := func() *Target {
		return &Target{
			Cluster:    "c1",
			Address:    &url.URL{Scheme: "https", Host: "10.0.0.1:6443"},
			CAData:     []byte("ca"),
			ServerName: "api",
			CertData:   []byte("cert"),
			KeyData:    []byte("key"),
			Tunnel:     &countingDialer{},
			TunnelID:   "t1",
		}
	}
	fp := base().Fingerprint()
	if other := base(); other.Fingerprint() != fp {
		t.Fatal("equal targets with different tunnel pointers differ")
	}
	for name, mutate := range map[string]func(*Target){
		"cluster":     func(t *Target) { t.Cluster = "c2" },
		"address":     func(t *Target) { t.Address = &url.URL{Scheme: "https", Host: "10.0.0.2:6443"} },
		"ca":          func(t *Target) { t.CAData = []byte("ca2") },
		"server name": func(t *Target) { t.ServerName = "api2" },
		"insecure":    func(t *Target) { t.Insecure = true },
		"cert":        func(t *Target) { t.CertData = []byte("cert2") },
		"key":         func(t *Target) { t.KeyData = []byte("key2") },
		"proxy":       func(t *Target) { t.ProxyURL = &url.URL{Scheme: "socks5", Host: "p:1080"} },
		"tunnel id":   func(t *Target) { t.TunnelID = "t2" },
		"no tunnel":   func(t *Target) { t.Tunnel = nil },
		"shifted":     func(t *Target) { t.CAData, t.ServerName = []byte("caa"), "pi" },
	} {
		tg := base()
		mutate(tg)
		if tg.Fingerprint() == fp {
			t.Errorf("changing %s kept the fingerprint", name)
		}
	}
}
