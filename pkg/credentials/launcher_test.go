package credentials

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/pkg/apis/clientauthentication"
	clientauthv1 "k8s.io/client-go/pkg/apis/clientauthentication/v1"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"k8s.io/client-go/transport"
	"k8s.io/klog/v2"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
)

// countRuns is how many runs the test provider noted in file
// (PROVIDER_RUNS).
func countRuns(t *testing.T, file string) int {
	t.Helper()
	raw, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(raw), "\n")
}

func writeFile(t *testing.T, file string, data []byte) {
	t.Helper()
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// captureLogs sends klog, at -v=10, and the process's standard error (the
// launcher's, which client-go passes on) to buffers until the test ends.
func captureLogs(t *testing.T) (logs func() string) {
	t.Helper()
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	for k, v := range map[string]string{"v": "10", "logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL"} {
		if err := fs.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var klogBuf bytes.Buffer
	klog.SetOutput(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return klogBuf.Write(p)
	}))
	stderrFile, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	saved, err := syscall.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Dup2(int(stderrFile.Fd()), 2); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Dup2(saved, 2)
		_ = syscall.Close(saved)
		_ = stderrFile.Close()
		klog.SetOutput(os.Stderr)
		for k, v := range map[string]string{"v": "0", "logtostderr": "true", "stderrthreshold": "ERROR"} {
			_ = fs.Set(k, v)
		}
	})
	return func() string {
		klog.Flush()
		raw, err := os.ReadFile(stderrFile.Name())
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		return klogBuf.String() + string(raw)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// malformedOutputs are provider outputs client-go fails to decode or
// refuses after, each with the marker "leak" where its error would quote
// it; validOutputs are some it takes.
var (
	malformedOutputs = map[string]string{
		"expirationTimestamp not a time": `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"secret-token-leak","expirationTimestamp":"leak-not-a-time"}}`,
		"expirationTimestamp not a date": `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"secret-token-leak","expirationTimestamp":"2026-13-45T00:00:00Z"}}`,
		"expirationTimestamp a number":   `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"secret-token-leak","expirationTimestamp":1767225600}}`,
		"expirationTimestamp no zone":    `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"secret-token-leak","expirationTimestamp":"2030-01-01T00:00:00"}}`,
		"unknown apiVersion":             `{"apiVersion":"client.authentication.k8s.io/leak","kind":"ExecCredential","status":{"token":"secret-token-leak"}}`,
		"other apiVersion":               `{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"secret-token-leak"}}`,
		"unknown kind":                   `{"apiVersion":"client.authentication.k8s.io/v1","kind":"LeakCredential","status":{"token":"secret-token-leak"}}`,
		"no apiVersion":                  `{"kind":"ExecCredential","status":{"token":"secret-token-leak"}}`,
		"not JSON":                       `secret-token-leak`,
		"not an object":                  `["secret-token-leak"]`,
		"empty":                          ``,
		"trailing garbage":               `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"secret-token-leak"}} leak`,
		"no status":                      `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","spec":{"leak":"secret-token-leak"}}`,
		"status a string":                `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":"secret-token-leak"}`,
		"token a number":                 `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":12345,"leak":"secret-token-leak"}}`,
		"empty status":                   `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"leak":"secret-token-leak"}}`,
		"certificate without key":        `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"secret-token-leak","clientCertificateData":"leak"}}`,
		"key without certificate":        `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"secret-token-leak","clientKeyData":"leak"}}`,
		"certificate and key not PEM":    `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"clientCertificateData":"secret-leak","clientKeyData":"secret-leak"}}`,
		"YAML with a bad expiry":         "apiVersion: client.authentication.k8s.io/v1\nkind: ExecCredential\nstatus:\n  token: secret-token-leak\n  expirationTimestamp: leak\n",
	}
	validOutputs = map[string]string{
		"token":                             `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"tok"}}`,
		"expiry with an offset":             `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"tok","expirationTimestamp":"2030-01-01T00:00:00+02:00"}}`,
		"expiry with fraction":              `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"tok","expirationTimestamp":"2030-01-01T00:00:00.123Z"}}`,
		"YAML":                              "apiVersion: client.authentication.k8s.io/v1\nkind: ExecCredential\nstatus:\n  token: tok\n",
		"unknown fields":                    `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","extra":1,"status":{"token":"tok","other":"x"}}`,
		"spec given":                        `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","spec":{"interactive":true},"status":{"token":"tok"}}`,
		"no kind":                           `{"apiVersion":"client.authentication.k8s.io/v1","status":{"token":"tok"}}`,
		"spec.cluster.config not an object": `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","spec":{"cluster":{"server":"x","config":"x"}},"status":{"token":"tok"}}`,
	}
	// stricterOutputs are some client-go takes that the launcher refuses:
	// its bounded parse (pkg/boundedyaml) reads no duplicate key and no
	// YAML alias, which one reader may take one way and another differently.
	stricterOutputs = map[string]string{
		"duplicate token": `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"first-leak","token":"tok-leak"}}`,
		"YAML alias":      "apiVersion: client.authentication.k8s.io/v1\nkind: ExecCredential\nstatus:\n  token: &t tok-leak\n  other: *t\n",
	}
)

// clientGoTakes runs the test provider printing output straight as
// client-go's exec plugin, without the launcher: whether client-go's own
// decoding and checks take it.
func clientGoTakes(t *testing.T, output string) bool {
	t.Helper()
	file := filepath.Join(t.TempDir(), "output")
	writeFile(t, file, []byte(output))
	cfg := &clientcmdapi.ExecConfig{Command: providerBin, APIVersion: "client.authentication.k8s.io/v1",
		Env: []clientcmdapi.ExecEnvVar{{Name: "PROVIDER_OUTPUT", Value: file}}, InteractiveMode: clientcmdapi.NeverExecInteractiveMode}
	a, err := newOwnedAuthenticator(cfg, &clientauthentication.Cluster{Server: "https://127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer released(a)
	tc := &transport.Config{}
	if err := a.UpdateTransportConfig(tc); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, "https://127.0.0.1/", nil)
	_, err = tc.WrapTransport(roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
	})).RoundTrip(req)
	if err == nil {
		_, err = tc.TLS.GetCertHolder.GetCert()
	}
	return err == nil
}

// What the launcher passes on is what client-go takes, and nothing else:
// each malformed output is one client-go refuses (run as its plugin
// directly), and through the gateway it is refused before client-go sees
// it, whether on the first run or after a 401, with a problem that names
// the provider and quotes nothing; nothing of it reaches the log at any
// verbosity or standard error. Outputs client-go takes work through the
// launcher too.
func TestProviderOutputClientGoWouldRefuse(t *testing.T) {
	// A certificate and key that do not match: client-go's pair check.
	ca, err := testpki.NewCA("launcher-decode-ca")
	if err != nil {
		t.Fatal(err)
	}
	a, b := ca.MustIssue(t, testpki.Spec{CommonName: "a", Client: true}), ca.MustIssue(t, testpki.Spec{CommonName: "b", Client: true})
	mismatched := fmt.Sprintf(`{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"secret-token-leak","clientCertificateData":%q,"clientKeyData":%q}}`, a.CertPEM, b.KeyPEM)
	malformed := map[string]string{"certificate and key do not match": mismatched}
	for k, v := range malformedOutputs {
		malformed[k] = v
	}
	valid := map[string]string{"certificate and key": fmt.Sprintf(`{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"clientCertificateData":%q,"clientKeyData":%q}}`, a.CertPEM, a.KeyPEM)}
	for k, v := range validOutputs {
		valid[k] = v
	}

	// The table means something only if client-go agrees.
	for name, out := range malformed {
		if clientGoTakes(t, out) {
			t.Errorf("%s: client-go takes it; the table is wrong", name)
		}
	}
	for name, out := range valid {
		if !clientGoTakes(t, out) {
			t.Errorf("%s: client-go refuses it; the table is wrong", name)
		}
	}
	for name, out := range stricterOutputs {
		if !clientGoTakes(t, out) {
			t.Errorf("%s: client-go refuses it; the table of stricter outputs is wrong", name)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	logs := captureLogs(t)
	type tc struct {
		name, how, output, file string
		provider                Provider
	}
	var cases []*tc
	for name, out := range malformed {
		cases = append(cases, &tc{name: name, how: "first run", output: out}, &tc{name: name, how: "after a 401", output: out})
	}
	for name, out := range valid {
		cases = append(cases, &tc{name: name, how: "valid", output: out})
	}
	for name, out := range stricterOutputs {
		cases = append(cases, &tc{name: name, how: "first run", output: out})
	}
	dir := t.TempDir()
	var ps []Provider
	for i, c := range cases {
		c.file = filepath.Join(dir, strconv.Itoa(i))
		first := c.output
		if c.how == "after a 401" {
			first = `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"good-token"}}`
		}
		writeFile(t, c.file, []byte(first))
		c.provider = Provider{Name: "p" + strconv.Itoa(i), Exec: execOf(providerBin, envVar("PROVIDER_OUTPUT", c.file))}
		ps = append(ps, c.provider)
	}
	p := providers(t, 30*time.Second, ps...)
	var wg sync.WaitGroup
	for _, tc := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := tc.how + ": " + tc.name
			c := &Cluster{Gateway: "g-" + tc.provider.Name, Provider: tc.provider.Name}
			st, err := p.Get(context.Background(), c)
			if err != nil {
				t.Errorf("%s: Get: %v", name, err)
				return
			}
			switch tc.how {
			case "valid":
				if st.Problem != "" || (st.Token != "tok" && len(st.Cert) == 0) {
					t.Errorf("%s: client-go takes it, the gateway has %+v", name, st)
				}
				return
			case "after a 401":
				if st.Token != "good-token" {
					t.Errorf("%s: the first run: %+v", name, st)
					return
				}
				writeFile(t, tc.file, []byte(tc.output))
				p.Unauthorized(context.Background(), c, "good-token", nil)
				st = p.Latest(c)
			case "first run":
				if !strings.Contains(st.Problem, fmt.Sprintf("credential provider %q printed no ExecCredential client-go can use", tc.provider.Name)) || st.Token != "" {
					t.Errorf("%s: State %+v, want the malformed problem", name, st)
				}
			}
			if strings.Contains(st.Problem, "leak") || strings.Contains(st.Token, "leak") {
				t.Errorf("%s: the State quotes the output: %+v", name, st)
			}
		}()
	}
	wg.Wait()
	got := logs()
	if !strings.Contains(got, "refreshing credentials") {
		t.Errorf("client-go logged no refresh failure after the 401s: the test does not see its log:\n%s", got)
	}
	if strings.Contains(got, "leak") {
		t.Errorf("the log quotes a provider's output:\n%s", got)
	}
}

// alive tells whether pid is a process (a zombie included: one nobody
// waited for is not gone).
func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}

// readPid is the pid the test provider's daemon wrote to file.
func readPid(t *testing.T, file string) int {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("the provider's daemon never started: %v", err)
	}
	pid, err := strconv.Atoi(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// A provider is stopped with all it started: a daemon that left its process
// group and session (setsid), whether its parent exited at once (a double
// fork) or is the provider's own child, and one that keeps the provider's
// stdout open, is gone when the run ends, when the provider exits and at its
// timeout. The daemon holding stdout does not hold the run: its credential
// is taken.
func TestProviderDescendantsAreKilled(t *testing.T) {
	for _, mode := range []string{"doublefork", "setsid", "stdout"} {
		for _, end := range []string{"exit", "timeout"} {
			t.Run(mode+"/"+end, func(t *testing.T) {
				t.Parallel()
				pidFile := filepath.Join(t.TempDir(), "daemon.pid")
				env := []clientcmdv1.ExecEnvVar{envVar("PROVIDER_DAEMON", pidFile), envVar("PROVIDER_DAEMON_MODE", mode), envVar("PROVIDER_TOKEN", "tok")}
				if end == "timeout" {
					env = append(env, envVar("PROVIDER_SLEEP", "1h"))
				}
				// The daemon starts in milliseconds; the timeout leaves the
				// race-built launcher time to start.
				p := providers(t, 10*time.Second, Provider{Name: "p", Exec: execOf(providerBin, env...)})
				st, err := p.Get(context.Background(), &Cluster{Gateway: "c", Provider: "p"})
				if err != nil {
					t.Fatal(err)
				}
				pid := readPid(t, pidFile)
				t.Cleanup(func() {
					if alive(pid) {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				})
				switch end {
				case "exit":
					if st.Problem != "" || st.Token != "tok" {
						t.Errorf("Get = %+v, want token tok", st)
					}
				case "timeout":
					if !strings.Contains(st.Problem, "did not answer within 10s") {
						t.Errorf("Get = %+v, want a timeout", st)
					}
				}
				if alive(pid) {
					t.Errorf("the provider's daemon (pid %d) outlived the run", pid)
				}
			})
		}
	}
}

// client-go runs the provider again at 4/5 of its credential's remaining
// life, not before: a 10 s token is refreshed after 8 s, and kept until 7 s
// (the ExecCredential's time has whole seconds: the moved expiry is rounded
// down).
func TestProviderRefreshesEarly(t *testing.T) {
	runs := filepath.Join(t.TempDir(), "runs")
	const life = 10 * time.Second
	p := providers(t, 30*time.Second, Provider{Name: "p", Exec: execOf(providerBin,
		envVar("PROVIDER_RUNS", runs), envVar("PROVIDER_TOKEN", "t%d"), envVar("PROVIDER_LIFETIME", life.String()))})
	c := &Cluster{Gateway: "c", Provider: "p"}
	before := time.Now() // the token expires after before+life; the launcher moves it after before+4/5 life
	first, err := p.Get(context.Background(), c)
	after := time.Now() // ... and to before after+4/5 life
	if err != nil || first.Token != "t1" {
		t.Fatalf("Get = %+v, %v", first, err)
	}
	keptUntil := before.Add(life*4/5 - time.Second)
	checked := 0
	for {
		st, err := p.Get(context.Background(), c)
		if !time.Now().Before(keptUntil) {
			break // this Get may have come after the refresh
		}
		checked++
		if err != nil || st != first {
			t.Fatalf("Get before 4/5 of the token's life: %+v, %v; want the first", st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if checked == 0 || countRuns(t, runs) != 1 {
		t.Fatalf("%d Gets checked before 4/5 of the life; the provider ran %d times, want 1", checked, countRuns(t, runs))
	}
	time.Sleep(time.Until(after.Add(life * 4 / 5)))
	if st, err := p.Get(context.Background(), c); err != nil || st.Token != "t2" || countRuns(t, runs) != 2 {
		t.Fatalf("Get after 4/5 of the token's life: %+v, %v, %d runs; want t2 from a second run", st, err, countRuns(t, runs))
	}
}

// A provider's output is bounded at 1 MiB: an ExecCredential of exactly
// that size is taken, one byte more is refused as malformed.
func TestProviderOutputBound(t *testing.T) {
	dir := t.TempDir()
	cred := `{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"bound-token"}`
	atBound := cred + strings.Repeat(" ", 1<<20-len(cred)-1) + "}"
	at, over := filepath.Join(dir, "at"), filepath.Join(dir, "over")
	writeFile(t, at, []byte(atBound))
	writeFile(t, over, []byte(atBound+" "))
	p := providers(t, 30*time.Second,
		Provider{Name: "at", Exec: execOf(providerBin, envVar("PROVIDER_OUTPUT", at))},
		Provider{Name: "over", Exec: execOf(providerBin, envVar("PROVIDER_OUTPUT", over))})
	if len(atBound) != 1<<20 {
		t.Fatalf("the output at the bound is %d bytes", len(atBound))
	}
	if st, err := p.Get(context.Background(), &Cluster{Gateway: "at", Provider: "at"}); err != nil || st.Token != "bound-token" {
		t.Errorf("1 MiB of output: %+v, %v; want the token", st, err)
	}
	st, err := p.Get(context.Background(), &Cluster{Gateway: "over", Provider: "over"})
	if err != nil || st.Token != "" || !strings.Contains(st.Problem, `credential provider "over" printed more than 1 MiB`) {
		t.Errorf("1 MiB and a byte of output: %+v, %v; want it refused", st, err)
	}
}

// The launcher moves an ExecCredential's expirationTimestamp to 4/5 of its
// remaining life, rounded down to a whole second, and to no less than
// minLife from now, rounded up; it keeps the original for the gateway.
func TestRefreshEarlyMovesExpiry(t *testing.T) {
	gv := clientauthv1.SchemeGroupVersion
	now := time.Date(2030, 1, 1, 0, 0, 0, 500_000_000, time.UTC)
	for _, tc := range []struct {
		name     string
		expires  string // the provider's expirationTimestamp; empty: none
		clientGo string // client-go's; empty: none
	}{
		{name: "100 s left", expires: "2030-01-01T00:01:40.5Z", clientGo: "2030-01-01T00:01:20Z"},
		{name: "1 h left", expires: "2030-01-01T01:00:00Z", clientGo: "2030-01-01T00:48:00Z"}, // 48:00.1 rounded down
		{name: "3 s left", expires: "2030-01-01T00:00:03.5Z", clientGo: "2030-01-01T00:00:06Z"},
		{name: "expired", expires: "2000-01-01T00:00:00Z", clientGo: "2030-01-01T00:00:06Z"},
		{name: "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status := `{"token":"tok"}`
			if tc.expires != "" {
				status = fmt.Sprintf(`{"token":"tok","expirationTimestamp":%q}`, tc.expires)
			}
			out, expires, ok := refreshEarly([]byte(`{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":`+status+`}`), gv, now)
			if !ok {
				t.Fatal("refused")
			}
			var cred clientauthv1.ExecCredential
			if err := json.Unmarshal(out, &cred); err != nil {
				t.Fatal(err)
			}
			if cred.Status == nil || cred.Status.Token != "tok" {
				t.Fatalf("client-go gets %s", out)
			}
			var got string
			if cred.Status.ExpirationTimestamp != nil {
				got = cred.Status.ExpirationTimestamp.UTC().Format(time.RFC3339)
			}
			if got != tc.clientGo {
				t.Errorf("client-go's expirationTimestamp = %q, want %q", got, tc.clientGo)
			}
			var want time.Time
			if tc.expires != "" {
				want, _ = time.Parse(time.RFC3339, tc.expires)
			}
			if !expires.Equal(want) {
				t.Errorf("the original expiry = %v, want %v", expires, want)
			}
		})
	}
}
