package gateways

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/component-base/metrics"

	"github.com/clustergateway/cluster-gateway/internal/testmetrics"
	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/credentials"
)

// testProviders configures provider "ok" (prints a token) and "fail"
// (exits 3) from a providers file, as the gateway reads it.
func testProviders(t *testing.T, extra ...string) *credentials.Providers {
	t.Helper()
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		return path
	}
	ok := write("ok", "#!/bin/sh\nprintf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"tok-1\"}}'\n", 0o755)
	fail := write("fail", "#!/bin/sh\necho tok-secret; exit 3\n", 0o755)
	// extra: name and ExecCredential status (JSON) of providers more
	var more strings.Builder
	for i := 0; i+1 < len(extra); i += 2 {
		cmd := write(extra[i], "#!/bin/sh\nprintf '%s' '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":"+extra[i+1]+"}'\n", 0o755)
		fmt.Fprintf(&more, "- name: %s\n  exec: {apiVersion: client.authentication.k8s.io/v1, command: %s}\n", extra[i], cmd)
	}
	file := write("providers.yaml", fmt.Sprintf(`apiVersion: gateway.clustergateway.io/v1alpha1
kind: CredentialProviderConfig
providers:
- name: ok
  exec: {apiVersion: client.authentication.k8s.io/v1, command: %s}
- name: fail
  timeout: 10s
  exec: {apiVersion: client.authentication.k8s.io/v1, command: %s}
`, ok, fail)+more.String(), 0o644)
	cfg, err := credentials.LoadConfig(file, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	p, err := credentials.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func providerGateway(t *testing.T, name, provider string) *v1alpha1.ClusterGateway {
	gw := x509Gateway(validCredential(t))
	gw.Name = name
	gw.Spec.Credential = v1alpha1.Credential{Type: v1alpha1.CredentialProvider, Provider: &v1alpha1.ProviderReference{
		Name: provider, Config: &runtime.RawExtension{Raw: []byte(`{"clusterName":"prod"}`)}}}
	return gw
}

// A Provider gateway's credential comes from its provider on a request;
// a failing or unconfigured provider makes it not Ready (ProviderFailed,
// without the provider's output).
func TestProviderGateways(t *testing.T) {
	var objs []runtime.Object
	for i, g := range []*v1alpha1.ClusterGateway{providerGateway(t, "good", "ok"), providerGateway(t, "bad", "fail"), providerGateway(t, "unknown", "nope")} {
		s := mustToSecret(t, g, nil)
		s.ResourceVersion = fmt.Sprint(i + 1)
		objs = append(objs, s)
	}
	client := fake.NewClientset(objs...)
	store := NewStore(client, testNamespace)
	providers := testProviders(t)
	if err := store.SetProviders(providers); err != nil {
		t.Fatal(err)
	}
	changed := make(chan *Gateway, 10)
	if err := store.OnChange(func(old, new *Gateway) {
		if old != nil && new != nil {
			changed <- new
		}
	}); err != nil {
		t.Fatal(err)
	}
	startStore(t, store)

	g, err := store.GetForRequest(context.Background(), "good")
	if err != nil || !g.Ready || g.Conn.Token != "tok-1" {
		t.Fatalf("good = %+v, %v; want Ready with the provider's token", g, err)
	}
	if c := g.Object.Status.Credential; c == nil || c.Source != "Provider ok" || c.LastRotationTime == nil {
		t.Errorf("status.credential = %+v, want source Provider ok and a rotation time", c)
	}
	select {
	case n := <-changed:
		if n.Conn.Token != "tok-1" {
			t.Errorf("OnChange told of %+v, want the new token", n.Conn)
		}
	default:
		t.Errorf("a provider's new credential was no change for OnChange")
	}
	if cached, _ := store.Get("good"); cached.Conn.Token != "tok-1" {
		t.Errorf("Get after the provider ran: token %q, want tok-1", cached.Conn.Token)
	}

	for name, want := range map[string]string{"bad": "exited with code 3", "unknown": "does not configure"} {
		g, err := store.GetForRequest(context.Background(), name)
		if err != nil || g.Ready {
			t.Fatalf("%s = %+v, %v; want not Ready", name, g, err)
		}
		cond := g.Object.Status.Conditions[0]
		if cond.Reason != v1alpha1.ReasonProviderFailed || !strings.Contains(cond.Message, want) || strings.Contains(cond.Message, "tok-secret") {
			t.Errorf("%s Ready = %s %s, want ProviderFailed saying %q, without the provider's output", name, cond.Reason, cond.Message, want)
		}
	}
	// A deleted gateway's provider state is released by its record's
	// deletion step: pkg/clusters' TestDeletionReleasesTheProviderState.
}

// status.credential.expirationTime of a Provider gateway is what its
// provider said (an opaque token's expirationTimestamp; before a
// certificate's notAfter), else the certificate's notAfter, and the
// next-expiry metric follows it.
func TestProviderExpirationTime(t *testing.T) {
	inHour := time.Now().Add(time.Hour).Truncate(time.Second).UTC()
	inTwo := inHour.Add(time.Hour)
	cred := validCredential(t)
	pemJSON := func(b []byte) string { return strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", `\n`) }
	certStatus := `"clientCertificateData":"` + pemJSON(cred.certPEM) + `","clientKeyData":"` + pemJSON(cred.keyPEM) + `"`
	providers := testProviders(t,
		"opaque", `{"token":"opaque-token","expirationTimestamp":"`+inTwo.Format(time.RFC3339)+`"}`,
		"cert-expires", `{`+certStatus+`,"expirationTimestamp":"`+inHour.Format(time.RFC3339)+`"}`,
		"cert", `{`+certStatus+`}`)
	leaf, err := v1alpha1.ParseKeyPair(cred.certPEM, cred.keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	for i, name := range []string{"opaque", "cert-expires", "cert", "ok"} {
		s := mustToSecret(t, providerGateway(t, name, name), nil)
		s.ResourceVersion = fmt.Sprint(i + 1)
		objs = append(objs, s)
	}
	store := NewStore(fake.NewClientset(objs...), testNamespace)
	if err := store.SetProviders(providers); err != nil {
		t.Fatal(err)
	}
	reg := metrics.NewKubeRegistry()
	store.Metrics().Register(reg)
	startStore(t, store)
	for name, want := range map[string]time.Time{"opaque": inTwo, "cert-expires": inHour, "cert": leaf.Leaf.NotAfter, "ok": {}} {
		g, err := store.GetForRequest(context.Background(), name)
		if err != nil || !g.Ready {
			t.Fatalf("%s = %+v, %v; want Ready", name, g, err)
		}
		c := g.Object.Status.Credential
		switch {
		case want.IsZero() && c.ExpirationTime != nil:
			t.Errorf("%s: expirationTime %v, want none (an opaque token without expirationTimestamp)", name, c.ExpirationTime)
		case !want.IsZero() && (c.ExpirationTime == nil || !c.ExpirationTime.Time.Equal(want.Truncate(time.Second))):
			t.Errorf("%s: expirationTime %v, want %v", name, c.ExpirationTime, want)
		}
	}
	samples, err := testmetrics.Gather(reg)
	if err != nil {
		t.Fatal(err)
	}
	first := inHour
	if leaf.Leaf.NotAfter.Before(first) {
		first = leaf.Leaf.NotAfter
	}
	if got := samples.Sum("cluster_gateway_credential_next_expiry_timestamp_seconds"); got != float64(first.Unix()) {
		t.Errorf("next expiry = %v, want %d", got, first.Unix())
	}
}
