package credentials

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/clustergateway/cluster-gateway/internal/testpoll"
)

// TestReloadChangesOnlyChangedProviders: a reload gives the new provider
// to the gateways of a provider whose definition changed, and leaves every
// other gateway's credential as it was (the same State, no run).
func TestReloadChangesOnlyChangedProviders(t *testing.T) {
	dir := t.TempDir()
	one := script(t, dir, "one", `printf '`+fmt.Sprintf(credential, "tok-1")+`'`)
	two := script(t, dir, "two", `printf '`+fmt.Sprintf(credential, "tok-2")+`'`)
	three := script(t, dir, "three", `printf '`+fmt.Sprintf(credential, "tok-3")+`'`)
	p := providers(t, 10*time.Second, Provider{Name: "a", Exec: execOf(one)}, Provider{Name: "b", Exec: execOf(two)})
	var told []string
	p.OnChange(func(gw string) { told = append(told, gw) })
	ca, cb := &Cluster{Gateway: "gw-a", Provider: "a", Server: "https://10.0.0.1"}, &Cluster{Gateway: "gw-b", Provider: "b", Server: "https://10.0.0.2"}
	ctx := context.Background()
	for c, want := range map[*Cluster]string{ca: "tok-1", cb: "tok-2"} {
		if st, err := p.Get(ctx, c); err != nil || st.Token != want {
			t.Fatalf("%s: %+v %v", c.Gateway, st, err)
		}
	}
	before := p.Latest(cb)
	told = nil

	cfg := &Config{APIVersion: ConfigAPIVersion, Kind: ConfigKind, Providers: []Provider{{Name: "a", Exec: execOf(three)}, {Name: "b", Exec: execOf(two)}}}
	if err := cfg.validate(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if changed := p.Reload(cfg); !slices.Equal(changed, []string{"gw-a"}) || !slices.Equal(told, []string{"gw-a"}) {
		t.Fatalf("Reload changed %v and told %v, want gw-a only", changed, told)
	}
	if st := p.Latest(cb); st != before {
		t.Errorf("gw-b's credential was touched by a reload that kept its provider: %+v, was %+v", st, before)
	}
	if st, err := p.Get(ctx, ca); err != nil || st.Token != "tok-3" {
		t.Errorf("gw-a after the reload: %+v %v, want the new provider's tok-3", st, err)
	}
	// A provider removed: its gateways say so.
	cfg = &Config{APIVersion: ConfigAPIVersion, Kind: ConfigKind, Providers: []Provider{{Name: "b", Exec: execOf(two)}}}
	_ = cfg.validate(10 * time.Second)
	if changed := p.Reload(cfg); !slices.Equal(changed, []string{"gw-a"}) {
		t.Errorf("removing provider a changed %v, want gw-a", changed)
	}
	if st, _ := p.Get(ctx, ca); st == nil || st.Problem == "" {
		t.Errorf("gw-a with its provider removed: %+v, want a problem", st)
	}
}

// TestWatchConfig: a changed file is reloaded; a bad one keeps the last
// good configuration until it is fixed.
func TestWatchConfig(t *testing.T) {
	dir := t.TempDir()
	one := script(t, dir, "one", `printf '`+fmt.Sprintf(credential, "tok-1")+`'`)
	two := script(t, dir, "two", `printf '`+fmt.Sprintf(credential, "tok-2")+`'`)
	file := filepath.Join(dir, "providers.json")
	write := func(s string) {
		if err := os.WriteFile(file+".tmp", []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".tmp", file); err != nil {
			t.Fatal(err)
		}
	}
	sig := func(cmd string) string {
		return `{"providers":[{"name":"a","execConfig":{"apiVersion":"client.authentication.k8s.io/v1","command":"` + cmd + `"}}]}`
	}
	write(sig(one))
	cfg, err := LoadConfig(file, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.WatchConfig(ctx, file, 10*time.Second, 20*time.Millisecond); close(done) }()
	defer func() { cancel(); <-done }()
	c := &Cluster{Gateway: "gw", Provider: "a"}
	token := func() string {
		st, err := p.Get(context.Background(), c)
		if err != nil || st == nil {
			return fmt.Sprint(err)
		}
		return st.Token
	}
	if got := token(); got != "tok-1" {
		t.Fatalf("token %q", got)
	}
	write(`{"providers":[{"name":"a","execConfig":{"apiVersion":"client.authentication.k8s.io/v1","command":"relative"}}]}`)
	time.Sleep(200 * time.Millisecond) // ten polls
	if got := token(); got != "tok-1" {
		t.Fatalf("after a bad file: token %q, want the last good provider's tok-1", got)
	}
	write(sig(two))
	testpoll.Eventually(t, 5*time.Second, "the fixed file is reloaded", func() error {
		if got := token(); got != "tok-2" {
			return fmt.Errorf("token %q", got)
		}
		return nil
	})
}
