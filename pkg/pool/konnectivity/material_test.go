package konnectivity

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
)

// New refuses material that cannot work, saying what is wrong.
func TestNewRejectsUnusableMaterial(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.MustCA(t, "ca")
	cert, key := issue(t, ca, "gw")
	_, otherKey := issue(t, ca, "other")
	files := map[string][]byte{"ca": ca.CertPEM, "cert": cert, "key": key, "other": otherKey,
		"empty": {}, "garbage": []byte("garbage"), "ca+key": append(append([]byte{}, key...), ca.CertPEM...)}
	for name, data := range files {
		writeFile(t, filepath.Join(dir, name), data)
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	good := *DefaultConfig()
	good.Addresses, good.CAFile, good.CertFile, good.KeyFile = []string{"127.0.0.1:1"}, p("ca"), p("cert"), p("key")
	if m, err := New(good); err != nil || m.ID() == "" {
		t.Fatalf("good material: %v", err)
	}
	// One strict reading of CA bundles for the whole gateway (pkg/cabundle):
	// a key in a CA file is a mistake worth refusing, not skipping.
	bad := good
	bad.CAFile = p("ca+key")
	if _, err := New(bad); err == nil || !strings.Contains(err.Error(), "not a CERTIFICATE") {
		t.Fatalf("a CA bundle with a stray key block: %v, want it refused", err)
	}
	for name, tc := range map[string]struct {
		mutate func(*Config)
		want   string
	}{
		"empty CA":        {func(o *Config) { o.CAFile = p("empty") }, "no PEM certificate"},
		"garbage CA":      {func(o *Config) { o.CAFile = p("garbage") }, "no PEM certificate"},
		"key as CA":       {func(o *Config) { o.CAFile = p("key") }, "not a CERTIFICATE"},
		"garbage cert":    {func(o *Config) { o.CertFile = p("garbage") }, "unusable"},
		"mismatched key":  {func(o *Config) { o.KeyFile = p("other") }, "belong together"},
		"missing key":     {func(o *Config) { o.KeyFile = p("absent") }, "no such file"},
		"no address":      {func(o *Config) { o.Addresses = nil }, "no proxy-server address"},
		"bad address":     {func(o *Config) { o.Addresses = []string{"127.0.0.1:1", "proxy-server"} }, `must be host:port, not "proxy-server"`},
		"same address":    {func(o *Config) { o.Addresses = []string{"127.0.0.1:1", "127.0.0.1:1"} }, "lists 127.0.0.1:1 twice"},
		"no health check": {func(o *Config) { o.HealthInterval = 0 }, "--konnectivity-health-interval must be positive"},
		"no CA":           {func(o *Config) { o.CAFile = "" }, "mTLS only"},
		"negative grace":  {func(o *Config) { o.RetireGrace = -1 }, "--retire-grace-period must not be negative"},
		"no dial timeout": {func(o *Config) { o.DialTimeout = 0 }, "--dial-timeout must be positive"},
	} {
		t.Run(name, func(t *testing.T) {
			o := good
			tc.mutate(&o)
			_, err := New(o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v", tc.want, err)
			}
		})
	}
}

// The ID follows content: equal files, equal ID; any change, a new ID.
func TestIDFollowsContent(t *testing.T) {
	a := rawMaterial{ca: []byte("a"), cert: []byte("b"), key: []byte("c")}
	b := rawMaterial{ca: []byte("ab"), cert: []byte(""), key: []byte("c")}
	if a.digest() == b.digest() {
		t.Fatal("moving bytes between files must change the ID")
	}
	if a.digest() != (rawMaterial{ca: []byte("a"), cert: []byte("b"), key: []byte("c")}).digest() {
		t.Fatal("same content must give the same ID")
	}
}
