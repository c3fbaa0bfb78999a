package credentials

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"weak"

	"k8s.io/client-go/plugin/pkg/client/auth/exec"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"

	"github.com/clustergateway/cluster-gateway/internal/testpoll"
)

// script writes an executable shell script into dir.
func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

const credential = `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s"}}`

func providers(t *testing.T, timeout time.Duration, ps ...Provider) *Providers {
	t.Helper()
	cfg := &Config{APIVersion: ConfigAPIVersion, Kind: ConfigKind, Providers: ps}
	if err := cfg.validate(timeout); err != nil {
		t.Fatal(err)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

func execOf(command string, env ...clientcmdv1.ExecEnvVar) clientcmdv1.ExecConfig {
	return clientcmdv1.ExecConfig{APIVersion: "client.authentication.k8s.io/v1", Command: command, Env: env}
}

// The provider sees only what its config names and the ExecCredential with
// the gateway's per-cluster config: nothing of the gateway's environment.
func TestProviderGetsCleanEnvironment(t *testing.T) {
	dir := t.TempDir()
	dump := filepath.Join(dir, "env")
	cmd := script(t, dir, "p", `env > "$DUMP"; printf '`+fmt.Sprintf(credential, "tok-1")+`'`)
	t.Setenv("HUB_SECRET_TOKEN", "hub-credential")
	p := providers(t, 10*time.Second, Provider{Name: "eks", Exec: execOf(cmd, clientcmdv1.ExecEnvVar{Name: "DUMP", Value: dump})})
	st, err := p.Get(context.Background(), &Cluster{Gateway: "c1", Provider: "eks", Server: "https://10.0.0.1", Config: []byte(`{"clusterName":"prod"}`)})
	if err != nil || st.Problem != "" || st.Token != "tok-1" {
		t.Fatalf("Get = %+v, %v; want token tok-1", st, err)
	}
	raw, err := os.ReadFile(dump)
	if err != nil {
		t.Fatal(err)
	}
	env := string(raw)
	if strings.Contains(env, "HUB_SECRET_TOKEN") || strings.Contains(env, "HOME=") {
		t.Errorf("the provider inherited the gateway's environment:\n%s", env)
	}
	for _, want := range []string{"DUMP=" + dump, `KUBERNETES_EXEC_INFO=`, `"clusterName":"prod"`, `"server":"https://10.0.0.1"`} {
		if !strings.Contains(env, want) {
			t.Errorf("the provider's environment lacks %s:\n%s", want, env)
		}
	}
}

// A failing provider sets a problem a user can act on, without its output.
func TestProviderFailureHidesOutput(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"exit":     `echo "secret-token-on-stdout"; echo "secret-token-on-stderr" >&2; exit 3`,
		"garbage":  `printf '{"status":{"token":"secret-token-without-kind"}}'`,
		"notfound": `exec /nonexistent/secret-token-path`,
	} {
		t.Run(name, func(t *testing.T) {
			p := providers(t, 10*time.Second, Provider{Name: "p", Exec: execOf(script(t, dir, name, body))})
			st, err := p.Get(context.Background(), &Cluster{Gateway: "c", Provider: "p"})
			if err != nil || st.Problem == "" || st.Token != "" {
				t.Fatalf("Get = %+v, %v; want a problem", st, err)
			}
			if strings.Contains(st.Problem, "secret-token") {
				t.Errorf("the problem quotes the provider's output: %s", st.Problem)
			}
			if !strings.Contains(st.Problem, `credential provider "p"`) {
				t.Errorf("the problem does not name the provider: %s", st.Problem)
			}
		})
	}
}

// A provider that hangs is stopped at its timeout, with its children
// (TestProviderDescendantsAreKilled: also those that left its group).
func TestProviderTimeout(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	// Long enough for the shell to start its child on a busy machine.
	p := providers(t, 2*time.Second, Provider{Name: "slow", Exec: execOf(script(t, dir, "p", `sleep 600 & echo $! > "$PIDS"; sleep 600`),
		clientcmdv1.ExecEnvVar{Name: "PIDS", Value: pidFile})})
	st, err := p.Get(context.Background(), &Cluster{Gateway: "c", Provider: "slow"})
	if err != nil || !strings.Contains(st.Problem, "did not answer within 2s") {
		t.Fatalf("Get = %+v, %v; want a timeout", st, err)
	}
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the provider's child never started: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("the provider's child (pid %d) outlived its timeout", pid)
	}
}

// Concurrent requests for one gateway run its provider once at a time.
func TestProviderRunsOneAtATime(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	// Each run has a token of its own, expired at once; each caller's 401
	// for the token it got runs the provider again unless another's did:
	// several runs, from concurrent callers.
	body := `echo start >> "$LOG"; sleep 0.1; echo end >> "$LOG"; printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"t%s","expirationTimestamp":"2000-01-01T00:00:00Z"}}' $(wc -l < "$LOG")`
	p := providers(t, 10*time.Second, Provider{Name: "p", Exec: execOf(script(t, dir, "p", body), clientcmdv1.ExecEnvVar{Name: "LOG", Value: log})})
	c := &Cluster{Gateway: "c", Provider: "p"}
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				st, err := p.Get(context.Background(), c)
				if err != nil || !strings.HasPrefix(st.Token, "t") {
					t.Errorf("Get = %+v, %v", st, err)
					return
				}
				p.Unauthorized(context.Background(), c, st.Token, nil)
			}
		}()
	}
	wg.Wait()
	raw, _ := os.ReadFile(log)
	lines := strings.Fields(string(raw))
	if len(lines) < 4 {
		t.Fatalf("the provider ran %d times, want several", len(lines)/2)
	}
	for i, l := range lines {
		if want := []string{"start", "end"}[i%2]; l != want {
			t.Fatalf("provider runs overlapped: %v", lines)
		}
	}
}

// A token is cached until (4/5 of the way to) its expiry: a second Get does
// not run the provider; a refused token makes it run again.
func TestProviderCachesAndRefreshesOn401(t *testing.T) {
	dir := t.TempDir()
	count := filepath.Join(dir, "count")
	exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	body := `echo x >> "$COUNT"; n=$(wc -l < "$COUNT"); printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"t%s","expirationTimestamp":"` + exp + `"}}' $n`
	p := providers(t, 10*time.Second, Provider{Name: "p", Exec: execOf(script(t, dir, "p", body), clientcmdv1.ExecEnvVar{Name: "COUNT", Value: count})})
	c := &Cluster{Gateway: "c", Provider: "p"}
	changes := 0
	p.OnChange(func(string) { changes++ })
	a, _ := p.Get(context.Background(), c)
	b, _ := p.Get(context.Background(), c)
	if a.Token != "t1" || b != a {
		t.Fatalf("second Get = %+v, want the cached %+v", b, a)
	}
	p.Unauthorized(context.Background(), c, "t1", nil)
	if st := p.Latest(c); st.Token != "t2" || st.Rotated.Before(a.Rotated) {
		t.Fatalf("after a 401: %+v, want t2", st)
	}
	p.Unauthorized(context.Background(), c, "t1", nil) // already replaced: no run
	if st := p.Latest(c); st.Token != "t2" || changes != 2 {
		t.Fatalf("a 401 for a replaced token ran the provider: %+v, %d changes", st, changes)
	}
}

// A deleted or changed gateway's Authenticator (holding its last token) is
// not kept by anyone: neither client-go's global caches nor Providers.
func TestReleasedAuthenticatorIsCollected(t *testing.T) {
	dir := t.TempDir()
	p := providers(t, 10*time.Second, Provider{Name: "p", Exec: execOf(script(t, dir, "p", `printf '`+fmt.Sprintf(credential, "tok")+`'`))})
	get := func(c *Cluster) weak.Pointer[cluster] {
		if st, err := p.Get(context.Background(), c); err != nil || st.Token != "tok" {
			t.Fatalf("Get = %+v, %v", st, err)
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		return weak.Make(p.clusters[c.Gateway])
	}
	authOf := func(w weak.Pointer[cluster]) weak.Pointer[exec.Authenticator] {
		return weak.Make(w.Value().auth)
	}
	changed := authOf(get(&Cluster{Gateway: "a", Provider: "p", Config: []byte(`{"v":1}`)}))
	get(&Cluster{Gateway: "a", Provider: "p", Config: []byte(`{"v":2}`)}) // replaces it
	deleted := authOf(get(&Cluster{Gateway: "b", Provider: "p"}))
	p.Release("b")
	testpoll.EventuallyTrue(t, 10*time.Second, "the Authenticators of a changed and a deleted gateway to be collected", func() bool {
		runtime.GC()
		return changed.Value() == nil && deleted.Value() == nil
	})
	if p.Len() != 1 {
		t.Errorf("Providers holds %d gateways, want 1", p.Len())
	}
}
