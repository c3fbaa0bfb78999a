package gateways

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/component-base/metrics"

	"github.com/clustergateway/cluster-gateway/internal/testmetrics"
	"github.com/clustergateway/cluster-gateway/internal/testpoll"
	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

const (
	sourceNamespace    = "capi-clusters"
	forbiddenNamespace = "no-access"
)

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

// kubeconfigBytes is a Cluster API-style kubeconfig: server, CA and either a
// token or a client certificate, all inline.
func kubeconfigBytes(t testing.TB, server string, ca []byte, token string, cert, key []byte) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca, TLSServerName: "kubernetes"}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: token, ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts["ctx"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "ctx"
	raw, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func capiSecret(name, rv string, kubeconfig []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: sourceNamespace, ResourceVersion: rv,
			Labels: map[string]string{"cluster.x-k8s.io/cluster-name": strings.TrimSuffix(name, "-kubeconfig")}},
		Type: "cluster.x-k8s.io/secret",
		Data: map[string][]byte{"value": kubeconfig},
	}
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
	c := newTestCredential(t, time.Now().Add(-time.Hour), notAfter)
	exp := time.Now().Add(time.Hour).Truncate(time.Second)
	src := capiSecret("prod-kubeconfig", "1", kubeconfigBytes(t, "https://10.0.0.7:6443", c.caPEM, jwt(exp), nil, nil))
	gwSecret := mustToSecret(t, refGateway("prod", v1alpha1.SecretReference{Namespace: sourceNamespace, Name: "prod-kubeconfig"}, ""), nil)
	gwSecret.ResourceVersion = "1"
	client := fake.NewClientset(src, gwSecret)
	store := NewStore(client, testNamespace, testNamespace, sourceNamespace)
	reg := metrics.NewKubeRegistry()
	store.Metrics().Register(reg)
	type change struct{ old, new *Gateway }
	changes := make(chan change, 100)
	if err := store.OnChange(func(old, new *Gateway) { changes <- change{old, new} }); err != nil {
		t.Fatal(err)
	}
	startStore(t, store)

	g, err := store.Get("prod")
	if err != nil || !g.Ready {
		t.Fatalf("Get(prod) = %+v, %v; want Ready from its kubeconfig Secret", g, err)
	}
	if g.Conn.Endpoint.Address != "https://10.0.0.7:6443" || g.Address.Host != "10.0.0.7:6443" || g.Conn.Endpoint.ServerName != "kubernetes" ||
		string(g.Conn.Endpoint.CABundle) != string(c.caPEM) || g.Conn.Token != jwt(exp) {
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
	rotate := func(rv string, kubeconfig []byte, isNew func(*Gateway) bool) change {
		t.Helper()
		upd := capiSecret("prod-kubeconfig", rv, kubeconfig)
		if _, err := client.CoreV1().Secrets(sourceNamespace).Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
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
	ch := rotate("2", kubeconfigBytes(t, "https://10.0.0.7:6443", c.caPEM, "new-token", nil, nil), func(g *Gateway) bool { return g.Conn.Token == "new-token" })
	if !SameTransport(ch.old, ch.new) || ch.new.Conn.Token != "new-token" {
		t.Errorf("a token rotation: SameTransport %v, token %q; want the same transport and the new token", SameTransport(ch.old, ch.new), ch.new.Conn.Token)
	}
	if g, _ := store.Get("prod"); g.Conn.Token != "new-token" {
		t.Errorf("Get after the rotation sends %q, want new-token", g.Conn.Token)
	}
	ch = rotate("3", kubeconfigBytes(t, "https://10.0.0.7:6443", c.caPEM, "", c.certPEM, c.keyPEM), func(g *Gateway) bool { return len(g.Conn.Cert) > 0 })
	if SameTransport(ch.old, ch.new) || !ch.new.Ready || ch.new.Public().Status.Credential.Subject == "" {
		t.Errorf("a switch to a client certificate: SameTransport %v, Ready %v, status %+v; want a new transport and the certificate's subject",
			SameTransport(ch.old, ch.new), ch.new.Ready, ch.new.Public().Status.Credential)
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

	if err := client.CoreV1().Secrets(sourceNamespace).Delete(ctx, "prod-kubeconfig", metav1.DeleteOptions{}); err != nil {
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

func readyReason(g *Gateway) string {
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
	c := validCredential(t)
	expired := time.Now().Add(-time.Minute)
	secrets := []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "token", Namespace: sourceNamespace}, Data: map[string][]byte{"token": []byte("t0k"), "ca.crt": c.caPEM}},
		{ObjectMeta: metav1.ObjectMeta{Name: "tls", Namespace: sourceNamespace}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": c.certPEM, "tls.key": c.keyPEM, "ca.crt": c.caPEM}},
		{ObjectMeta: metav1.ObjectMeta{Name: "expired", Namespace: sourceNamespace}, Data: map[string][]byte{"token": []byte(jwt(expired))}},
		{ObjectMeta: metav1.ObjectMeta{Name: "empty", Namespace: sourceNamespace}, Data: map[string][]byte{"other": []byte("x")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "exec", Namespace: sourceNamespace}, Data: map[string][]byte{"kubeconfig": []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://10.0.0.9"}}]
users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: aws}}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "badkey", Namespace: sourceNamespace}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": c.certPEM, "tls.key": []byte("not a key")}},
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
	client.PrependReactor("list", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
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
			tc.ref.Namespace = sourceNamespace
		}
		s := mustToSecret(t, refGateway(fmt.Sprintf("gw-%d", i), tc.ref, tc.address), nil)
		if _, err := client.CoreV1().Secrets(testNamespace).Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	store := NewStore(client, testNamespace, testNamespace, sourceNamespace, forbiddenNamespace)
	startStoreExcept(t, store, forbiddenNamespace)
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
	if g, _ := store.Get("gw-1"); string(g.Conn.Endpoint.CABundle) != string(c.caPEM) || len(g.Conn.Cert) == 0 {
		t.Errorf("a TLS Secret's ca.crt and key pair: Conn = %+v", g.Conn)
	}
}
