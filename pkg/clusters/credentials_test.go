package clusters

// The credential's resolution, moved here from pkg/gateways with the code
// it tests: Secret sources, credential providers, untrusted kubeconfigs.

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/component-base/metrics"

	"github.com/clustergateway/cluster-gateway/internal/testgateways"
	"github.com/clustergateway/cluster-gateway/internal/testmetrics"
	"github.com/clustergateway/cluster-gateway/internal/testpoll"
	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/credentials"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
	"github.com/clustergateway/cluster-gateway/pkg/pool"
)

const forbiddenNamespace = "no-access"

// newOwner is the records over store (and providers, when set), as
// pkg/apiserver wires them, before the store runs.
func newOwner(t *testing.T, store *gateways.Store, providers *credentials.Providers) *Owner {
	t.Helper()
	pl, err := pool.New(*pool.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pl.Close)
	owner, err := New(Config{Store: store, Pool: pl, Providers: providers})
	if err != nil {
		t.Fatal(err)
	}
	return owner
}

// startStore runs store until the test ends and waits for its first lists
// and for owner's record of each gateway.
func startStore(t *testing.T, store *gateways.Store, owner *Owner) {
	t.Helper()
	startStoreExcept(t, store, owner, "")
}

// startStoreExcept is startStore, but does not wait for the credential
// Secrets of namespace unlisted.
func startStoreExcept(t *testing.T, store *gateways.Store, owner *Owner, unlisted string) {
	t.Helper()
	testgateways.Run(t, store.Run, "the store to sync and each gateway to have its record", func() bool {
		if !store.HasSynced() || !store.SourcesSynced(unlisted) {
			return false
		}
		gws, _, err := store.List(nil)
		return err == nil && owner.Len() == len(gws)
	})
}

func mustToSecret(t *testing.T, gw *v1alpha1.ClusterGateway, _ *corev1.Secret) *corev1.Secret {
	t.Helper()
	s, err := gateways.NewSecret(gw, ns)
	if err != nil {
		t.Fatalf("toSecret: %v", err)
	}
	return s
}

func refGateway(name string, ref v1alpha1.SecretReference, address string) *v1alpha1.ClusterGateway {
	gw := &v1alpha1.ClusterGateway{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ClusterGatewaySpec{
			Endpoint:   v1alpha1.Endpoint{Address: address},
			Credential: v1alpha1.Credential{Type: v1alpha1.CredentialSecretRef, SecretRef: &ref},
		},
	}
	v1alpha1.SetDefaults_ClusterGateway(gw)
	return gw
}

// jwt is an unsigned JWT with exp: the gateway reads exp only to show it.
func jwt(exp time.Time) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"none"}`)) + "." + enc([]byte(fmt.Sprintf(`{"sub":"gw","exp":%d}`, exp.Unix()))) + ".sig"
}

// A gateway that names a Cluster API kubeconfig Secret is resolved from it:
// server, CA, TLS server name and token come from the kubeconfig, the
// status names the source and the token's expiry, and reads show no
// material. A new token keeps the transport; a new certificate does not; a
// deleted Secret makes the gateway not Ready with a reason.
func TestSecretRefFollowsRotation(t *testing.T) {
	ctx := t.Context()
	notAfter := time.Now().Add(2 * time.Hour).Truncate(time.Second)
	c := testgateways.ClientCredential(t, time.Now().Add(-time.Hour), notAfter)
	exp := time.Now().Add(time.Hour).Truncate(time.Second)
	src := testgateways.CAPISecret("prod-kubeconfig", "1", testgateways.KubeconfigBytes(t, "https://10.0.0.7:6443", c.CAPEM, jwt(exp), nil, nil))
	gwSecret := mustToSecret(t, refGateway("prod", v1alpha1.SecretReference{Namespace: testgateways.SourceNamespace, Name: "prod-kubeconfig"}, ""), nil)
	gwSecret.ResourceVersion = "1"
	client := fake.NewClientset(src, gwSecret)
	store := gateways.NewStore(client, ns, ns, testgateways.SourceNamespace)
	owner := newOwner(t, store, nil)
	reg := metrics.NewKubeRegistry()
	store.Metrics().Register(reg)
	type change struct{ old, new *gateways.Gateway }
	changes := make(chan change, 100)
	owner.OnChange(func(old, new *gateways.Gateway) { changes <- change{old, new} })
	startStore(t, store, owner)

	g, err := store.Get("prod")
	if err != nil || !g.Ready {
		t.Fatalf("Get(prod) = %+v, %v; want Ready from its kubeconfig Secret", g, err)
	}
	if g.Conn.Endpoint.Address != "https://10.0.0.7:6443" || g.Address.Host != "10.0.0.7:6443" || g.Conn.Endpoint.ServerName != "kubernetes" ||
		string(g.Conn.Endpoint.CABundle) != string(c.CAPEM) || g.Conn.Token != jwt(exp) {
		t.Errorf("Conn = %+v; want the kubeconfig's server, CA, server name and token", g.Conn)
	}
	cred := g.Public().Status.Credential
	if cred == nil || cred.Source != "Secret capi-clusters/prod-kubeconfig (Kubeconfig)" || cred.ExpirationTime == nil || !cred.ExpirationTime.Time.Equal(exp) {
		t.Errorf("status.credential = %+v; want the source and the JWT's exp %s", cred, exp)
	}
	if pub := g.Public(); pub.Spec.Endpoint.Address != "" || pub.Spec.Credential.BearerToken != "" {
		t.Errorf("Public() shows %+v; want the spec as written, without material", pub.Spec)
	}
	if g2, _ := store.Get("prod"); g2 != g {
		t.Errorf("an unchanged source was resolved again")
	}

	// The change reported for a rotation: the one whose new version is it.
	rotate := func(rv string, kubeconfig []byte, isNew func(*gateways.Gateway) bool) change {
		t.Helper()
		upd := testgateways.CAPISecret("prod-kubeconfig", rv, kubeconfig)
		if _, err := client.CoreV1().Secrets(testgateways.SourceNamespace).Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		for {
			select {
			case ch := <-changes:
				if ch.new != nil && ch.old != nil && ch.new.Name() == "prod" && isNew(ch.new) && !isNew(ch.old) {
					return ch
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("no change reported for the rotation to resourceVersion %s", rv)
			}
		}
	}
	ch := rotate("2", testgateways.KubeconfigBytes(t, "https://10.0.0.7:6443", c.CAPEM, "new-token", nil, nil), func(g *gateways.Gateway) bool { return g.Conn.Token == "new-token" })
	if !gateways.SameTransport(ch.old, ch.new) || ch.new.Conn.Token != "new-token" {
		t.Errorf("a token rotation: SameTransport %v, token %q; want the same transport and the new token", gateways.SameTransport(ch.old, ch.new), ch.new.Conn.Token)
	}
	if g, _ := store.Get("prod"); g.Conn.Token != "new-token" {
		t.Errorf("Get after the rotation sends %q, want new-token", g.Conn.Token)
	}
	ch = rotate("3", testgateways.KubeconfigBytes(t, "https://10.0.0.7:6443", c.CAPEM, "", c.CertPEM, c.KeyPEM), func(g *gateways.Gateway) bool { return len(g.Conn.Cert) > 0 })
	if gateways.SameTransport(ch.old, ch.new) || !ch.new.Ready || ch.new.Public().Status.Credential.Subject == "" {
		t.Errorf("a switch to a client certificate: SameTransport %v, Ready %v, status %+v; want a new transport and the certificate's subject",
			gateways.SameTransport(ch.old, ch.new), ch.new.Ready, ch.new.Public().Status.Credential)
	}

	samples, err := testmetrics.Gather(reg)
	if err != nil {
		t.Fatal(err)
	}
	if got := samples.Sum("cluster_gateway_credential_rotations_total"); got != 2 {
		t.Errorf("cluster_gateway_credential_rotations_total = %v after two rotations, want 2", got)
	}
	if got := samples.Sum("cluster_gateway_credential_next_expiry_timestamp_seconds"); got != float64(notAfter.Unix()) {
		t.Errorf("next expiry = %v, want the certificate's notAfter %d", got, notAfter.Unix())
	}

	if err := client.CoreV1().Secrets(testgateways.SourceNamespace).Delete(ctx, "prod-kubeconfig", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testpoll.EventuallyTrue(t, 30*time.Second, "the deleted source to make the gateway not Ready", func() bool {
		g, err := store.Get("prod")
		return err == nil && readyReason(g) == v1alpha1.ReasonSourceNotFound
	})
	if samples, _ = testmetrics.Gather(reg); samples.Sum("cluster_gateway_credential_source_errors_total") == 0 {
		t.Errorf("no source error counted for the deleted Secret")
	}
}

func readyReason(g *gateways.Gateway) string {
	for _, c := range g.Object.Status.Conditions {
		if c.Type == v1alpha1.ConditionReady {
			return c.Reason
		}
	}
	return ""
}

// Each way a source can be unusable is a Ready=False reason a user can act
// on; the other gateways are untouched.
func TestSecretRefProblems(t *testing.T) {
	c := testgateways.ValidCredential(t)
	expired := time.Now().Add(-time.Minute)
	secrets := []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "token", Namespace: testgateways.SourceNamespace}, Data: map[string][]byte{"token": []byte("t0k"), "ca.crt": c.CAPEM}},
		{ObjectMeta: metav1.ObjectMeta{Name: "tls", Namespace: testgateways.SourceNamespace}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": c.CertPEM, "tls.key": c.KeyPEM, "ca.crt": c.CAPEM}},
		{ObjectMeta: metav1.ObjectMeta{Name: "expired", Namespace: testgateways.SourceNamespace}, Data: map[string][]byte{"token": []byte(jwt(expired))}},
		{ObjectMeta: metav1.ObjectMeta{Name: "empty", Namespace: testgateways.SourceNamespace}, Data: map[string][]byte{"other": []byte("x")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "exec", Namespace: testgateways.SourceNamespace}, Data: map[string][]byte{"kubeconfig": []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://10.0.0.9"}}]
users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: aws}}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "badkey", Namespace: testgateways.SourceNamespace}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": c.CertPEM, "tls.key": []byte("not a key")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: "kube-system"}, Data: map[string][]byte{"token": []byte("t")}},
	}
	cases := []struct {
		ref     v1alpha1.SecretReference
		address string
		reason  string
		message string
	}{
		{v1alpha1.SecretReference{Name: "token"}, "https://10.0.0.1", v1alpha1.ReasonValid, ""},
		{v1alpha1.SecretReference{Name: "tls"}, "https://10.0.0.1", v1alpha1.ReasonValid, ""},
		{v1alpha1.SecretReference{Name: "token"}, "", v1alpha1.ReasonSourceMalformed, "names no server"},
		{v1alpha1.SecretReference{Name: "tls", Format: v1alpha1.SecretFormatKubeconfig}, "https://10.0.0.1", v1alpha1.ReasonSourceMalformed, "has no kubeconfig under data[value]"},
		{v1alpha1.SecretReference{Name: "missing"}, "https://10.0.0.1", v1alpha1.ReasonSourceNotFound, "does not exist"},
		{v1alpha1.SecretReference{Name: "expired"}, "https://10.0.0.1", v1alpha1.ReasonCertExpired, "token expired"},
		{v1alpha1.SecretReference{Name: "empty"}, "https://10.0.0.1", v1alpha1.ReasonSourceMalformed, "holds none of"},
		{v1alpha1.SecretReference{Name: "exec"}, "", v1alpha1.ReasonSourceMalformed, "credential type Provider"},
		{v1alpha1.SecretReference{Name: "badkey"}, "https://10.0.0.1", v1alpha1.ReasonSourceMalformed, "not a usable pair"},
		{v1alpha1.SecretReference{Name: "elsewhere", Namespace: "kube-system"}, "https://10.0.0.1", v1alpha1.ReasonSourceNotRead, "--credential-source-namespaces"},
		{v1alpha1.SecretReference{Name: "any", Namespace: forbiddenNamespace}, "https://10.0.0.1", v1alpha1.ReasonSourceNotRead, "has not listed the Secrets of namespace"},
	}
	client := fake.NewClientset()
	// The gateway may not list Secrets in forbiddenNamespace: its informer
	// never syncs, which makes only the gateways that name it not Ready.
	client.PrependReactor("list", "secrets", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		if a.GetNamespace() == forbiddenNamespace {
			return true, nil, apierrors.NewForbidden(corev1.Resource("secrets"), "", fmt.Errorf("no RBAC rule"))
		}
		return false, nil, nil
	})
	for _, s := range secrets {
		if _, err := client.CoreV1().Secrets(s.Namespace).Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i, tc := range cases {
		if tc.ref.Namespace == "" {
			tc.ref.Namespace = testgateways.SourceNamespace
		}
		s := mustToSecret(t, refGateway(fmt.Sprintf("gw-%d", i), tc.ref, tc.address), nil)
		if _, err := client.CoreV1().Secrets(ns).Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	store := gateways.NewStore(client, ns, ns, testgateways.SourceNamespace, forbiddenNamespace)
	startStoreExcept(t, store, newOwner(t, store, nil), forbiddenNamespace)
	for i, tc := range cases {
		g, err := store.Get(fmt.Sprintf("gw-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if got := readyReason(g); got != tc.reason || (tc.reason == v1alpha1.ReasonValid) != g.Ready || !strings.Contains(g.Problem, tc.message) {
			t.Errorf("%+v with address %q: Ready %v, reason %s, problem %q; want reason %s saying %q", tc.ref, tc.address, g.Ready, got, g.Problem, tc.reason, tc.message)
		}
		if strings.Contains(g.Problem, "t0k") || strings.Contains(g.Problem, "PRIVATE KEY") {
			t.Errorf("the problem %q shows material", g.Problem)
		}
	}
	if g, _ := store.Get("gw-1"); string(g.Conn.Endpoint.CABundle) != string(c.CAPEM) || len(g.Conn.Cert) == 0 {
		t.Errorf("a TLS Secret's ca.crt and key pair: Conn = %+v", g.Conn)
	}
}

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
	gw := testgateways.X509Gateway(testgateways.ValidCredential(t))
	gw.Name = name
	gw.Spec.Credential = v1alpha1.Credential{Type: v1alpha1.CredentialProvider, Provider: &v1alpha1.ProviderReference{
		Name: provider, Config: &k8sruntime.RawExtension{Raw: []byte(`{"clusterName":"prod"}`)}}}
	return gw
}

// A Provider gateway's credential comes from its provider on a request;
// a failing or unconfigured provider makes it not Ready (ProviderFailed,
// without the provider's output).
func TestProviderGateways(t *testing.T) {
	var objs []k8sruntime.Object
	for i, g := range []*v1alpha1.ClusterGateway{providerGateway(t, "good", "ok"), providerGateway(t, "bad", "fail"), providerGateway(t, "unknown", "nope")} {
		s := mustToSecret(t, g, nil)
		s.ResourceVersion = fmt.Sprint(i + 1)
		objs = append(objs, s)
	}
	client := fake.NewClientset(objs...)
	store := gateways.NewStore(client, ns)
	providers := testProviders(t)
	owner := newOwner(t, store, providers)
	changed := make(chan *gateways.Gateway, 10)
	owner.OnChange(func(old, new *gateways.Gateway) {
		if old != nil && new != nil {
			changed <- new
		}
	})
	startStore(t, store, owner)

	g, err := owner.GetForRequest(context.Background(), "good")
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
		g, err := owner.GetForRequest(context.Background(), name)
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
	cred := testgateways.ValidCredential(t)
	pemJSON := func(b []byte) string { return strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", `\n`) }
	certStatus := `"clientCertificateData":"` + pemJSON(cred.CertPEM) + `","clientKeyData":"` + pemJSON(cred.KeyPEM) + `"`
	providers := testProviders(t,
		"opaque", `{"token":"opaque-token","expirationTimestamp":"`+inTwo.Format(time.RFC3339)+`"}`,
		"cert-expires", `{`+certStatus+`,"expirationTimestamp":"`+inHour.Format(time.RFC3339)+`"}`,
		"cert", `{`+certStatus+`}`)
	leaf, err := v1alpha1.ParseKeyPair(cred.CertPEM, cred.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	var objs []k8sruntime.Object
	for i, name := range []string{"opaque", "cert-expires", "cert", "ok"} {
		s := mustToSecret(t, providerGateway(t, name, name), nil)
		s.ResourceVersion = fmt.Sprint(i + 1)
		objs = append(objs, s)
	}
	store := gateways.NewStore(fake.NewClientset(objs...), ns)
	owner := newOwner(t, store, providers)
	reg := metrics.NewKubeRegistry()
	store.Metrics().Register(reg)
	startStore(t, store, owner)
	for name, want := range map[string]time.Time{"opaque": inTwo, "cert-expires": inHour, "cert": leaf.Leaf.NotAfter, "ok": {}} {
		g, err := owner.GetForRequest(context.Background(), name)
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

// aliasBomb is a kubeconfig that is usable as far as client-go is
// concerned, plus an extension of 2000 aliases to one 200 KiB string:
// about 200 KiB that clientcmd.Load expands to over a GiB.
func aliasBomb(t *testing.T, c testgateways.Credential) []byte {
	var b strings.Builder
	b.Write(testgateways.KubeconfigBytes(t, "https://10.0.0.7:6443", c.CAPEM, "bomb-token", nil, nil))
	fmt.Fprintf(&b, "extensions:\n- name: a\n  extension: &a \"%s\"\n- name: b\n  extension: [", strings.Repeat("x", 200<<10))
	for i := range 2000 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("*a")
	}
	b.WriteString("]\n")
	return []byte(b.String())
}

// heapAllocated is how many bytes the process allocated while f ran
// (cumulative: it does not depend on when the GC ran).
func heapAllocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// sourceStore starts a store over secrets and one gateway per entry of
// refs (gateway name -> Secret name in testgateways.SourceNamespace).
func sourceStore(t *testing.T, secrets []*corev1.Secret, refs map[string]string) (*gateways.Store, *Owner, *fake.Clientset) {
	t.Helper()
	var objs []k8sruntime.Object
	for _, s := range secrets {
		objs = append(objs, s)
	}
	for gw, sec := range refs {
		s := mustToSecret(t, refGateway(gw, v1alpha1.SecretReference{Namespace: testgateways.SourceNamespace, Name: sec}, ""), nil)
		s.ResourceVersion = "1"
		objs = append(objs, s)
	}
	client := fake.NewClientset(objs...)
	store := gateways.NewStore(client, ns, ns, testgateways.SourceNamespace)
	return store, newOwner(t, store, nil), client
}

// A Secret whose kubeconfig is an alias bomb makes only its own gateway
// SourceMalformed, saying what to fix without quoting it, and reading it
// allocates a small multiple of its size; so does one over the byte cap.
// The gateway next to them, on a good Secret, stays Ready.
func TestKubeconfigAliasBombOnlyItsGateway(t *testing.T) {
	c := testgateways.ValidCredential(t)
	bomb := aliasBomb(t, c)
	big := append(testgateways.KubeconfigBytes(t, "https://10.0.0.8:6443", c.CAPEM, "big-token", nil, nil),
		[]byte("extensions:\n- name: pad\n  extension: \""+strings.Repeat("y", gateways.KubeconfigMaxBytes)+"\"\n")...)
	store, owner, _ := sourceStore(t, []*corev1.Secret{
		testgateways.CAPISecret("bomb-kubeconfig", "1", bomb),
		testgateways.CAPISecret("big-kubeconfig", "1", big),
		testgateways.CAPISecret("good-kubeconfig", "1", testgateways.KubeconfigBytes(t, "https://10.0.0.9:6443", c.CAPEM, "good-token", nil, nil)),
	}, map[string]string{"bomb": "bomb-kubeconfig", "big": "big-kubeconfig", "good": "good-kubeconfig"})
	startStore(t, store, owner)

	var g *gateways.Gateway
	var err error
	// The documented cost of parsing (pkg/boundedyaml: at most 160 bytes
	// allocated per byte), plus what the store's own goroutines allocate
	// meanwhile; following the aliases costs over a GiB.
	if got, bound := heapAllocated(func() { g, err = store.Get("bomb") }), uint64(160*len(bomb)+16<<20); got > bound {
		t.Errorf("reading the %d KiB alias bomb allocated %d MiB, want at most %d MiB", len(bomb)>>10, got>>20, bound>>20)
	}
	if err != nil {
		t.Fatal(err)
	}
	if g.Ready || readyReason(g) != v1alpha1.ReasonSourceMalformed || !strings.Contains(g.Problem, "uses a YAML anchor or alias") || !strings.Contains(g.Problem, "write each value out in full") {
		t.Errorf("the alias bomb's gateway: Ready %v, reason %s, problem %q; want SourceMalformed saying to write each value out", g.Ready, readyReason(g), g.Problem)
	}
	if g, err = store.Get("big"); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("more than the %d KiB the gateway reads", gateways.KubeconfigMaxBytes>>10); g.Ready || readyReason(g) != v1alpha1.ReasonSourceMalformed || !strings.Contains(g.Problem, want) {
		t.Errorf("the oversized kubeconfig's gateway: Ready %v, reason %s, problem %q; want SourceMalformed saying %q", g.Ready, readyReason(g), g.Problem, want)
	}
	for _, name := range []string{"bomb", "big"} {
		g, _ := store.Get(name)
		if p := g.Problem; strings.Contains(p, "xxx") || strings.Contains(p, "yyy") || strings.Contains(p, "-token") || len(p) > 400 {
			t.Errorf("%s: the problem quotes the kubeconfig: %.300q", name, p)
		}
	}
	if g, err = store.Get("good"); err != nil || !g.Ready || g.Conn.Token != "good-token" {
		t.Errorf("the gateway on a good Secret next to them: %+v, %v; want Ready with its token", g, err)
	}
}

// Each version of a Secret's material is parsed once, however many
// gateways name it and however many subscribers (the proxy, the prober,
// the inventory sync, ...) and requests resolve them at once; a write
// that changes only the Secret's metadata, or the same version handed over
// again (an informer's relist), parses nothing.
func TestSourceParsedOncePerVersion(t *testing.T) {
	c := testgateways.ValidCredential(t)
	const nGateways, subscribers = 3, 8
	// A kubeconfig that takes a while to parse, so that subscribers
	// resolving at once would overlap if each parsed its own.
	kubeconfig := func(token string) []byte {
		var b strings.Builder
		b.Write(testgateways.KubeconfigBytes(t, "https://10.0.0.7:6443", c.CAPEM, token, nil, nil))
		b.WriteString("extensions:\n")
		for i := range 1000 { // 7 nodes each, within the node budget
			fmt.Fprintf(&b, "- {name: e%d, extension: {k: v}}\n", i)
		}
		return []byte(b.String())
	}
	refs := map[string]string{}
	for i := range nGateways {
		refs[fmt.Sprintf("gw-%d", i)] = "shared-kubeconfig"
	}
	store, owner, client := sourceStore(t, []*corev1.Secret{testgateways.CAPISecret("shared-kubeconfig", "1", kubeconfig("token-1"))}, refs)

	var mu sync.Mutex
	seen := make([]map[string]string, subscribers) // subscriber -> gateway -> token last seen
	calls := make([]int, subscribers)
	for i := range subscribers {
		seen[i] = map[string]string{}
		owner.OnChange(func(_, new *gateways.Gateway) {
			if new != nil {
				mu.Lock()
				seen[i][new.Name()] = new.Conn.Token
				calls[i]++
				mu.Unlock()
			}
		})
	}
	allSaw := func(token string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range seen {
				for gw := range refs {
					if m[gw] != token {
						return false
					}
				}
			}
			return true
		}
	}
	callsNow := func() []int {
		mu.Lock()
		defer mu.Unlock()
		return append([]int(nil), calls...)
	}
	parses := gateways.SourceParses()
	parsed := func(what string) {
		t.Helper()
		if got := gateways.SourceParses() - parses; got != 1 {
			t.Errorf("%s: the kubeconfig was parsed %d times by %d gateways and %d subscribers, want once", what, got, nGateways, subscribers)
		}
		parses = gateways.SourceParses()
	}
	startStore(t, store, owner)
	// Subscribers may first hear of the gateways before the source's
	// namespace is synced (SourceNotRead), so the first read is Get's.
	for gw := range refs {
		if g, err := store.Get(gw); err != nil || g.Conn.Token != "token-1" {
			t.Fatalf("%s: %+v, %v; want the first token", gw, g, err)
		}
	}
	parsed("first read")

	update := func(rv string, kubeconfig []byte, labels map[string]string) {
		t.Helper()
		s := testgateways.CAPISecret("shared-kubeconfig", rv, kubeconfig)
		s.Labels = labels
		if _, err := client.CoreV1().Secrets(testgateways.SourceNamespace).Update(t.Context(), s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	update("2", kubeconfig("token-2"), nil)
	testpoll.EventuallyTrue(t, 30*time.Second, "every subscriber to see the rotated token", allSaw("token-2"))
	parsed("a rotation")

	// Requests resolving at once while the Secret rotates: still once.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for gw := range refs {
					_, _ = store.Get(gw)
				}
			}
		})
	}
	update("3", kubeconfig("token-3"), nil)
	testpoll.EventuallyTrue(t, 30*time.Second, "every subscriber to see the token rotated under requests", allSaw("token-3"))
	close(stop)
	wg.Wait()
	parsed("a rotation under concurrent requests")

	// Only metadata changes: every subscriber hears of each gateway, and
	// nothing is parsed.
	was := callsNow()
	update("4", kubeconfig("token-3"), map[string]string{"team": "a"})
	testpoll.EventuallyTrue(t, 30*time.Second, "every subscriber to hear of the metadata change", func() bool {
		now := callsNow()
		for i := range now {
			if now[i] < was[i]+nGateways {
				return false
			}
		}
		return true
	})
	if got := gateways.SourceParses() - parses; got != 0 {
		t.Errorf("a write that changed only metadata parsed the kubeconfig %d times, want none", got)
	}

	// The same version handed over again is the Source already held:
	// pkg/gateways' TestSourceRelistIsTheSameSource (the store's cache).
}
