package credentials

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
)

func envVar(name, value string) clientcmdv1.ExecEnvVar {
	return clientcmdv1.ExecEnvVar{Name: name, Value: value}
}

// The provider's environment is exactly what its config names, and
// KUBERNETES_EXEC_INFO: not one variable of the gateway's.
func TestProviderEnvironmentIsItsConfig(t *testing.T) {
	dump := filepath.Join(t.TempDir(), "env")
	t.Setenv("GATEWAY_ONLY_SECRET", "gateway-env-secret")
	p := providers(t, 10*time.Second, Provider{Name: "p", Exec: execOf(providerBin,
		envVar("PROVIDER_ENV_DUMP", dump), envVar("PROVIDER_TOKEN", "tok"))})
	if st, err := p.Get(context.Background(), &Cluster{Gateway: "c", Provider: "p"}); err != nil || st.Token != "tok" {
		t.Fatalf("Get = %+v, %v; want token tok", st, err)
	}
	raw, err := os.ReadFile(dump)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, kv := range strings.Split(string(raw), "\x00") {
		names = append(names, strings.SplitN(kv, "=", 2)[0])
	}
	sort.Strings(names)
	if got, want := strings.Join(names, " "), "KUBERNETES_EXEC_INFO PROVIDER_ENV_DUMP PROVIDER_TOKEN"; got != want {
		t.Errorf("the provider's environment has %s, want only %s", got, want)
	}
}

// A provider's client certificate is the gateway's credential; a new one
// is a new State (a new pool entry), the same one is no change.
func TestProviderClientCertificate(t *testing.T) {
	dir := t.TempDir()
	ca, err := testpki.NewCA("provider-test-ca")
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "crt"), filepath.Join(dir, "key")
	issue := func(cn string) *testpki.Pair {
		pair := ca.MustIssue(t, testpki.Spec{CommonName: cn, Client: true})
		if err := os.WriteFile(certFile, pair.CertPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyFile, pair.KeyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		return pair
	}
	// Expired at once: client-go keeps it minLife (whole seconds), then a
	// Get runs the provider, as at each expiry.
	runs := filepath.Join(dir, "runs")
	p := providers(t, 10*time.Second, Provider{Name: "p", Exec: execOf(providerBin, envVar("PROVIDER_RUNS", runs),
		envVar("PROVIDER_CERT_FILE", certFile), envVar("PROVIDER_KEY_FILE", keyFile), envVar("PROVIDER_EXPIRED", "1"))})
	changes := 0
	p.OnChange(func(string) { changes++ })
	c := &Cluster{Gateway: "c", Provider: "p"}
	get := func(want *testpki.Pair) *State {
		t.Helper()
		st, err := p.Get(context.Background(), c)
		if err != nil || st.Problem != "" || st.Token != "" {
			t.Fatalf("Get = %+v, %v; want a certificate", st, err)
		}
		got, err := tls.X509KeyPair(st.Cert, st.Key)
		if err != nil {
			t.Fatalf("the State's certificate and key: %v", err)
		}
		wantPair, err := tls.X509KeyPair(want.CertPEM, want.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Certificate[0], wantPair.Certificate[0]) {
			t.Fatalf("the State's certificate is not the provider's latest")
		}
		return st
	}
	expire := func(wantRuns int) {
		t.Helper()
		time.Sleep(minLife + time.Second)
		if got := countRuns(t, runs); got != wantRuns {
			t.Fatalf("the provider ran %d times, want %d", got, wantRuns)
		}
	}
	first := issue("first")
	a := get(first)
	expire(1)
	if b := get(first); b != a || changes != 1 {
		t.Fatalf("the same certificate again: a new State (%v) or %d changes, want none", b != a, changes)
	}
	second := issue("second")
	expire(2)
	if b := get(second); b == a || changes != 2 || b.Rotated.Before(a.Rotated) {
		t.Fatalf("a new certificate: same State (%v) or %d changes, want a new one and 2", b == a, changes)
	}
}

// Under churn (gateways changed and deleted over and over) nothing stays:
// neither Providers' entries nor client-go's process-global expiry map.
func TestProviderChurnKeepsNothing(t *testing.T) {
	p := providers(t, 10*time.Second, Provider{Name: "p", Exec: execOf(providerBin, envVar("PROVIDER_TOKEN", "tok"),
		envVar("PROVIDER_EXPIRES", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)))})
	tracked := func() int {
		execExpirationMetrics.mu.RLock()
		defer execExpirationMetrics.mu.RUnlock()
		return len(execExpirationMetrics.m)
	}
	base := tracked()
	for i := range 30 {
		gw := fmt.Sprintf("g%d", i%3)
		c := &Cluster{Gateway: gw, Provider: "p", Config: []byte(fmt.Sprintf(`{"v":%d}`, i))} // a change each time
		if st, err := p.Get(context.Background(), c); err != nil || st.Token != "tok" {
			t.Fatalf("Get = %+v, %v", st, err)
		}
		if i%5 == 4 {
			p.Release(gw)
		}
	}
	if got := tracked(); got != base+p.Len() {
		t.Errorf("client-go's expiry map holds %d Authenticators, want %d (one per live gateway)", got-base, p.Len())
	}
	for i := range 3 {
		p.Release(fmt.Sprintf("g%d", i))
	}
	if p.Len() != 0 || tracked() != base {
		t.Errorf("after every gateway went: Providers holds %d, client-go's expiry map %d more than before; want 0 and 0", p.Len(), tracked()-base)
	}
	if entries, err := os.ReadDir(p.dir); err != nil || len(entries) != 0 {
		t.Errorf("after every gateway went the private directory holds %d files (%v), want none", len(entries), err)
	}
}

// State.Expires is the provider's own expirationTimestamp (not the one
// moved for client-go's early refresh), else its certificate's notAfter,
// else zero; the launcher's note of it is in the Providers' private
// directory, under no gateway's name, and goes with the gateway.
func TestProviderExpiry(t *testing.T) {
	dir := t.TempDir()
	ca, err := testpki.NewCA("provider-expiry-ca")
	if err != nil {
		t.Fatal(err)
	}
	pair := ca.MustIssue(t, testpki.Spec{CommonName: "expiry", Client: true})
	certFile, keyFile := filepath.Join(dir, "crt"), filepath.Join(dir, "key")
	if err := os.WriteFile(certFile, pair.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pair.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	leaf, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	notAfter := leaf.Leaf.NotAfter
	expFile := filepath.Join(dir, "expires")
	setExpires := func(ts string) {
		if err := os.WriteFile(expFile, []byte(ts), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	inHour := time.Now().Add(time.Hour).Truncate(time.Second)
	setExpires(inHour.UTC().Format(time.RFC3339))
	certEnv := []clientcmdv1.ExecEnvVar{envVar("PROVIDER_CERT_FILE", certFile), envVar("PROVIDER_KEY_FILE", keyFile)}
	p := providers(t, 10*time.Second,
		Provider{Name: "opaque", Exec: execOf(providerBin, envVar("PROVIDER_TOKEN", "opaque-token"), envVar("PROVIDER_EXPIRES", expFile))},
		Provider{Name: "cert", Exec: execOf(providerBin, certEnv...)},
		Provider{Name: "cert-expires", Exec: execOf(providerBin, append(certEnv, envVar("PROVIDER_EXPIRES", expFile))...)},
		Provider{Name: "none", Exec: execOf(providerBin, envVar("PROVIDER_TOKEN", "opaque-token"))},
	)
	if st, err := os.Stat(p.dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("the private directory: %v, %v; want mode 0700", st, err)
	}
	const secretName = "gateway-name-never-a-path"
	for _, tc := range []struct {
		provider string
		want     time.Time
	}{
		{"opaque", inHour}, // not 4/5 of the way, as client-go has it
		{"cert", notAfter},
		{"cert-expires", inHour}, // the ExecCredential's first
		{"none", time.Time{}},
	} {
		c := &Cluster{Gateway: secretName + "-" + tc.provider, Provider: tc.provider}
		st, err := p.Get(context.Background(), c)
		if err != nil || st.Problem != "" {
			t.Fatalf("%s: Get = %+v, %v", tc.provider, st, err)
		}
		if !st.Expires.Equal(tc.want) {
			t.Errorf("%s: Expires = %v, want %v", tc.provider, st.Expires, tc.want)
		}
	}
	entries, err := os.ReadDir(p.dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 { // opaque and cert-expires
		t.Errorf("the private directory holds %d files, want 2 (the credentials with an expirationTimestamp)", len(entries))
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), secretName) {
			t.Errorf("a file in the private directory is named for its gateway: %s", e.Name())
		}
		raw, _ := os.ReadFile(filepath.Join(p.dir, e.Name()))
		if strings.Contains(string(raw), "opaque-token") || strings.Contains(string(raw), "PRIVATE") {
			t.Errorf("the expiry file holds the credential: %s", raw)
		}
	}

	// The same token with no expiry any more: the State says so (no
	// rotation), and the launcher's file goes.
	c := &Cluster{Gateway: secretName + "-opaque", Provider: "opaque"}
	before := p.Latest(c)
	setExpires("")
	p.Unauthorized(context.Background(), c, "opaque-token", nil)
	after := p.Latest(c)
	if after == before || !after.Expires.IsZero() || !after.Rotated.Equal(before.Rotated) {
		t.Errorf("after a run without expirationTimestamp: a new State %v, Expires %v, Rotated moved %v; want a new State, zero, not moved",
			after != before, after.Expires, !after.Rotated.Equal(before.Rotated))
	}
	if entries, _ := os.ReadDir(p.dir); len(entries) != 1 {
		t.Errorf("the private directory holds %d files, want 1 (cert-expires)", len(entries))
	}
	p.Release(secretName + "-cert-expires")
	if entries, _ := os.ReadDir(p.dir); len(entries) != 0 {
		t.Errorf("after Release the private directory holds %d files, want none", len(entries))
	}
}

// A cluster's 401 to a certificate-only credential runs the provider again
// when the refused certificate is the current one, not for an older one.
func TestProviderCertificateRefused(t *testing.T) {
	dir := t.TempDir()
	ca, err := testpki.NewCA("provider-refused-ca")
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "crt"), filepath.Join(dir, "key")
	issue := func(cn string) {
		pair := ca.MustIssue(t, testpki.Spec{CommonName: cn, Client: true})
		if err := os.WriteFile(certFile, pair.CertPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyFile, pair.KeyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := providers(t, 10*time.Second, Provider{Name: "p", Exec: execOf(providerBin,
		envVar("PROVIDER_CERT_FILE", certFile), envVar("PROVIDER_KEY_FILE", keyFile))})
	c := &Cluster{Gateway: "c", Provider: "p"}
	issue("first")
	first, err := p.Get(context.Background(), c)
	if err != nil || len(first.Cert) == 0 {
		t.Fatalf("Get = %+v, %v", first, err)
	}
	issue("second")
	if st, _ := p.Get(context.Background(), c); st != first {
		t.Fatalf("no expiry, no 401: the provider ran again")
	}
	p.Unauthorized(context.Background(), c, "", []byte("-----BEGIN CERTIFICATE-----\nnot the current one\n-----END CERTIFICATE-----\n"))
	if st := p.Latest(c); st != first {
		t.Fatalf("a 401 to another certificate ran the provider")
	}
	p.Unauthorized(context.Background(), c, "", first.Cert)
	st := p.Latest(c)
	if st == first || len(st.Cert) == 0 || bytes.Equal(st.Cert, first.Cert) {
		t.Fatalf("after a 401 to the current certificate: the same State (%v), want the provider's new certificate", st == first)
	}
}
