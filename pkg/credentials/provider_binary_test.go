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
	// Expired at once: every Get runs the provider, as at each expiry.
	p := providers(t, 10*time.Second, Provider{Name: "p", Exec: execOf(providerBin,
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
	first := issue("first")
	a := get(first)
	if b := get(first); b != a || changes != 1 {
		t.Fatalf("the same certificate again: a new State (%v) or %d changes, want none", b != a, changes)
	}
	second := issue("second")
	if b := get(second); b == a || changes != 2 || b.Rotated.Before(a.Rotated) {
		t.Fatalf("a new certificate: same State (%v) or %d changes, want a new one and 2", b == a, changes)
	}
}

// Under churn (gateways changed and deleted over and over) nothing stays:
// neither Providers' entries nor client-go's process-global expiry map.
func TestProviderChurnKeepsNothing(t *testing.T) {
	p := providers(t, 10*time.Second, Provider{Name: "p", Exec: execOf(providerBin, envVar("PROVIDER_TOKEN", "tok"))})
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
}
