package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// Credentials read from hub Secrets (spec.credential.type SecretRef), in
// the gateway's own namespace, which it reads by default.

// putSourceSecret creates or replaces Secret name in the gateway's namespace
// and deletes it at cleanup.
func putSourceSecret(t *testing.T, hub kubernetes.Interface, s *corev1.Secret) {
	t.Helper()
	s.Namespace = localenv.GatewayNamespace
	ctx := context.Background()
	_, err := hub.CoreV1().Secrets(s.Namespace).Update(ctx, s, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		_, err = hub.CoreV1().Secrets(s.Namespace).Create(ctx, s, metav1.CreateOptions{})
		t.Cleanup(func() { _ = hub.CoreV1().Secrets(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{}) })
	}
	if err != nil {
		t.Fatalf("write Secret %s: %v", s.Name, err)
	}
}

// capiKubeconfig is what Cluster API writes for managed cluster m: server and
// CA, and a token or a client certificate, all inline.
func capiKubeconfig(t *testing.T, m *localenv.Cluster, ca []byte, token string, cert *gatewayv1alpha1.X509Credential) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: m.URL, CertificateAuthorityData: ca}
	u := &clientcmdapi.AuthInfo{Token: token}
	if cert != nil {
		u.ClientCertificateData, u.ClientKeyData = cert.Certificate, cert.PrivateKey
	}
	cfg.AuthInfos["u"] = u
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "c"
	raw, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func capiSecret(name string, kubeconfig []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"cluster.x-k8s.io/cluster-name": strings.TrimSuffix(name, "-kubeconfig")}},
		Type:       "cluster.x-k8s.io/secret",
		Data:       map[string][]byte{"value": kubeconfig},
	}
}

// secretRefGateway names Secret secret in the gateway's namespace.
func secretRefGateway(name, secret, address string, ca []byte) *gatewayv1alpha1.ClusterGateway {
	return &gatewayv1alpha1.ClusterGateway{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: gatewayv1alpha1.ClusterGatewaySpec{
			Endpoint: gatewayv1alpha1.Endpoint{Address: address, CABundle: ca},
			Credential: gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialSecretRef,
				SecretRef: &gatewayv1alpha1.SecretReference{Namespace: localenv.GatewayNamespace, Name: secret}},
		},
	}
}

// readyOf is the gateway's Ready condition as the hub serves it.
func readyOf(t *testing.T, name string) (metav1.Condition, *gatewayv1alpha1.ClusterGateway) {
	t.Helper()
	gw, err := gatewayClient(t, env.Hub.Kubeconfig).GatewayV1alpha1().ClusterGateways().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get ClusterGateway %s: %v", name, err)
	}
	if c := readyCondition(gw); c != nil {
		return *c, gw
	}
	return metav1.Condition{}, gw
}

func awaitReady(t *testing.T, name, reason string) *gatewayv1alpha1.ClusterGateway {
	t.Helper()
	var gw *gatewayv1alpha1.ClusterGateway
	eventually(t, fmt.Sprintf("ClusterGateway %s Ready with reason %s", name, reason), func() error {
		var c metav1.Condition
		c, gw = readyOf(t, name)
		if c.Reason != reason {
			return fmt.Errorf("Ready %s %s: %s", c.Status, c.Reason, c.Message)
		}
		return nil
	})
	return gw
}

// Two attackers, one who may write ClusterGateways but not read Secrets, and
// one who points an existing Secret-sourced gateway elsewhere: neither is
// allowed, and the attacker's server receives nothing. The admin, who may
// read the Secret, may.
func TestSecretSourceWritersCannotSteal(t *testing.T) {
	requireGateway(t)
	hub := hubAdmin(t)
	m := env.Managed[0]
	secret := uniqueName(t, "steal") + "-kubeconfig"
	putSourceSecret(t, hub, capiSecret(secret, capiKubeconfig(t, m, m.CA.CertPEM, "", &gatewayv1alpha1.X509Credential{Certificate: m.GatewayUser.CertPEM, PrivateKey: m.GatewayUser.KeyPEM})))
	owned := uniqueName(t, "owned")
	createGateway(t, secretRefGateway(owned, secret, "", nil))
	awaitReady(t, owned, gatewayv1alpha1.ReasonValid)
	if code, body := hubGet(t, proxyPath(owned, "/api/v1/namespaces/default")); code != http.StatusOK {
		t.Fatalf("through the Secret-sourced gateway: %d %s", code, body)
	}

	mallory := newHubUser(t, "mallory")
	role := uniqueName(t, "gateway-writer")
	bind(t, "clusterrole", role, "--verb=get,list,watch,create,update,patch", "--resource=clustergateways.gateway.clustergateway.io")
	bind(t, "clusterrolebinding", role, "--clusterrole="+role, "--user="+mallory.Name)
	if r := kubectl(t, mallory.Kubeconfig, nil, "", "auth", "can-i", "get", "secrets/"+secret, "-n", localenv.GatewayNamespace); strings.TrimSpace(r.Stdout) != "no" {
		t.Fatalf("mallory may read the Secret (%q): the test would prove nothing", r.Stdout)
	}
	evil := startCapture(t)

	// The first attacker creates a gateway that names the Secret and sends
	// its credential to her server.
	stolen := secretRefGateway(uniqueName(t, "stolen"), secret, evil.URL, evil.CAPEM)
	raw := fmt.Sprintf(`{"apiVersion":"gateway.clustergateway.io/v1alpha1","kind":"ClusterGateway","metadata":{"name":%q},"spec":{"endpoint":{"address":%q,"caBundle":%q},"credential":{"type":"SecretRef","secretRef":{"namespace":%q,"name":%q}}}}`,
		stolen.Name, evil.URL, base64.StdEncoding.EncodeToString(evil.CAPEM), localenv.GatewayNamespace, secret)
	r := kubectl(t, mallory.Kubeconfig, nil, raw, "create", "-f", "-")
	if r.Err == nil || !strings.Contains(r.Stderr, "Forbidden") || !strings.Contains(r.Stderr, "needs permission to get it") {
		t.Fatalf("mallory created a gateway that names a Secret she cannot read: err=%v stdout=%s stderr=%s", r.Err, r.Stdout, r.Stderr)
	}
	// The second points the existing gateway at her server.
	for _, patch := range []string{
		fmt.Sprintf(`{"spec":{"endpoint":{"address":%q,"caBundle":%q}}}`, evil.URL, base64.StdEncoding.EncodeToString(evil.CAPEM)),
		fmt.Sprintf(`{"spec":{"endpoint":{"address":%q,"insecureSkipTLSVerify":true}}}`, evil.URL),
		`{"spec":{"impersonation":{"mode":"Caller"}}}`,
	} {
		r := kubectl(t, mallory.Kubeconfig, nil, "", "patch", "clustergateway", owned, "--type=merge", "-p", patch)
		if r.Err == nil || !strings.Contains(r.Stderr, "Forbidden") {
			t.Fatalf("mallory's patch %s was not refused: err=%v stdout=%s stderr=%s", patch, r.Err, r.Stdout, r.Stderr)
		}
	}
	// A label does not move the credential: allowed.
	mustKubectl(t, mallory.Kubeconfig, "label", "clustergateway", owned, "team=blue")
	if code, body := hubGet(t, proxyPath(owned, "/api/v1/namespaces/default")); code != http.StatusOK {
		t.Fatalf("after refused patches and a label: %d %s", code, body)
	}
	if _, err := gatewayClient(t, env.Hub.Kubeconfig).GatewayV1alpha1().ClusterGateways().Get(context.Background(), stolen.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused gateway exists: %v", err)
	}
	if got := evil.requests(); len(got) != 0 {
		t.Fatalf("the attacker's server received %d requests, the first with Authorization %q", len(got), got[0].Header.Get("Authorization"))
	}
}

// The token and TLS formats: the endpoint is the spec's, the CA the
// Secret's ca.crt; a rotation is followed; a deleted Secret makes the
// gateway not Ready (SourceNotFound), its requests 503, and retires its
// pooled transport.
func TestSecretSourceFormats(t *testing.T) {
	requireGateway(t)
	hub := hubAdmin(t)
	m := env.Managed[0]
	tokens := ensureTokenIdentity(t, m)
	for _, tc := range []struct {
		format string
		data   func() map[string][]byte
	}{
		{"Token", func() map[string][]byte {
			return map[string][]byte{"token": []byte(newToken(t, tokens)), "ca.crt": m.CA.CertPEM}
		}},
		{"TLS", func() map[string][]byte {
			c := newClientCert(t, m.CA)
			return map[string][]byte{"tls.crt": c.Certificate, "tls.key": c.PrivateKey, "ca.crt": m.CA.CertPEM}
		}},
	} {
		t.Run(tc.format, func(t *testing.T) {
			name := uniqueName(t, "src-"+strings.ToLower(tc.format))
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-creds"}, Data: tc.data()}
			if tc.format == "TLS" {
				s.Type = corev1.SecretTypeTLS
			}
			putSourceSecret(t, hub, s)
			createGateway(t, secretRefGateway(name, s.Name, m.URL, nil))
			gw := awaitReady(t, name, gatewayv1alpha1.ReasonValid)
			want := fmt.Sprintf("Secret %s/%s (%s)", localenv.GatewayNamespace, s.Name, tc.format)
			if c := gw.Status.Credential; c == nil || c.Source != want || c.LastRotationTime == nil || c.ExpirationTime == nil {
				t.Errorf("status.credential = %+v; want source %q, a rotation time and an expiry", c, want)
			}
			get := func() (int, string) { return hubGet(t, proxyPath(name, "/api/v1/namespaces/default")) }
			if code, body := get(); code != http.StatusOK {
				t.Fatalf("through the %s Secret: %d %s", tc.format, code, body)
			}
			before := gw.Status.Credential.LastRotationTime
			// The hub records write times to the second: a rotation in the
			// same second as the create would show the same time.
			time.Sleep(time.Until(before.Add(1100 * time.Millisecond)))
			s.Data = tc.data()
			putSourceSecret(t, hub, s)
			eventually(t, "the rotation to show in status", func() error {
				_, gw := readyOf(t, name)
				if c := gw.Status.Credential; c == nil || c.LastRotationTime == nil || !c.LastRotationTime.After(before.Time) {
					return fmt.Errorf("status.credential %+v", c)
				}
				return nil
			})
			if code, body := get(); code != http.StatusOK {
				t.Fatalf("after the rotation: %d %s", code, body)
			}
			retiredBefore := gatewayMetrics(t)[`cluster_gateway_pool_entry_retirements_total{reason="unusable"}`]
			if err := hub.CoreV1().Secrets(localenv.GatewayNamespace).Delete(context.Background(), s.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			awaitReady(t, name, gatewayv1alpha1.ReasonSourceNotFound)
			if code, body := get(); code != http.StatusServiceUnavailable || !strings.Contains(body, "does not exist") {
				t.Errorf("with its Secret deleted: %d %s; want 503 saying the Secret does not exist", code, body)
			}
			eventually(t, "the pooled transport to be retired as unusable", func() error {
				if got := gatewayMetrics(t)[`cluster_gateway_pool_entry_retirements_total{reason="unusable"}`]; got <= retiredBefore {
					return fmt.Errorf("retirements{unusable} %v, was %v", got, retiredBefore)
				}
				return nil
			})
		})
	}
}

// --credential-source-namespaces: a Cluster API namespace where the gateway
// may read Secrets works like its own; one where it may not (no RBAC) makes
// only the gateways that name it not Ready, and the gateway still starts;
// a namespace not listed is refused when written.
func TestSecretSourceOtherNamespaces(t *testing.T) {
	requireGateway(t)
	hub := hubAdmin(t)
	m := env.Managed[0]
	open, closed := uniqueName(t, "capi"), uniqueName(t, "closed")
	for _, ns := range []string{open, closed} {
		if _, err := hub.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = hub.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	}
	// What docs/install.md tells an operator to grant in each source namespace.
	mustKubectl(t, env.Hub.Kubeconfig, "create", "role", "cluster-gateway-sources", "-n", open, "--verb=get,list,watch", "--resource=secrets")
	mustKubectl(t, env.Hub.Kubeconfig, "create", "rolebinding", "cluster-gateway-sources", "-n", open, "--role=cluster-gateway-sources",
		"--serviceaccount="+localenv.GatewayNamespace+":cluster-gateway")
	restartGateway(t, []string{"--credential-source-namespaces=" + open + "," + closed})
	t.Cleanup(func() { restartGateway(t, nil) })

	s := capiSecret(uniqueName(t, "prod")+"-kubeconfig", capiKubeconfig(t, m, m.CA.CertPEM, "", &gatewayv1alpha1.X509Credential{Certificate: m.GatewayUser.CertPEM, PrivateKey: m.GatewayUser.KeyPEM}))
	if _, err := hub.CoreV1().Secrets(open).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	inOpen := secretRefGateway(uniqueName(t, "open"), s.Name, "", nil)
	inOpen.Spec.Credential.SecretRef.Namespace = open
	createGateway(t, inOpen)
	inClosed := secretRefGateway(uniqueName(t, "closed"), "any", m.URL, nil)
	inClosed.Spec.Credential.SecretRef.Namespace = closed
	createGateway(t, inClosed)

	awaitReady(t, inOpen.Name, gatewayv1alpha1.ReasonValid)
	if code, body := hubGet(t, proxyPath(inOpen.Name, "/api/v1/namespaces/default")); code != http.StatusOK {
		t.Fatalf("through a Secret in %s: %d %s", open, code, body)
	}
	gw := awaitReady(t, inClosed.Name, gatewayv1alpha1.ReasonSourceNotRead)
	if c := readyCondition(gw); !strings.Contains(c.Message, "get, list and watch Secrets there") {
		t.Errorf("the reason for a namespace the gateway cannot list: %q", c.Message)
	}

	unlisted := secretRefGateway(uniqueName(t, "unlisted"), "any", m.URL, nil)
	unlisted.Spec.Credential.SecretRef.Namespace = "kube-system"
	_, err := gatewayClient(t, env.Hub.Kubeconfig).GatewayV1alpha1().ClusterGateways().Create(context.Background(), unlisted, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "--credential-source-namespaces") {
		t.Errorf("a gateway naming a Secret in kube-system: %v; want 422 naming --credential-source-namespaces", err)
	}
}
