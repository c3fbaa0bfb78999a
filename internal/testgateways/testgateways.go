// Package testgateways holds the fixtures that the tests of pkg/gateways,
// pkg/clusters and pkg/registry/clustergateway share: a client credential,
// ClusterGateways that carry one or a token, Cluster API kubeconfig Secrets,
// and a store run until the test ends (Run, which the tests of pkg/proxy and
// pkg/apiserver use too). It imports none of those packages (pkg/gateways'
// own tests import it), and no product code imports it.
package testgateways

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
	"github.com/clustergateway/cluster-gateway/internal/testpoll"
	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// Credential is a PEM CA and a client certificate and key it signed.
type Credential struct {
	CAPEM, CertPEM, KeyPEM []byte
}

// NewCredential issues a certificate for the user "gateway" in
// system:masters from a new CA; spec adds usages and validity.
func NewCredential(t testing.TB, spec testpki.Spec) Credential {
	t.Helper()
	ca := testpki.MustCA(t, "test-ca")
	spec.CommonName, spec.Organization = "gateway", []string{"system:masters"}
	c := ca.MustIssue(t, spec)
	return Credential{CAPEM: ca.CertPEM, CertPEM: c.CertPEM, KeyPEM: c.KeyPEM}
}

// ClientCredential is a client certificate valid from notBefore to notAfter.
func ClientCredential(t testing.TB, notBefore, notAfter time.Time) Credential {
	t.Helper()
	return NewCredential(t, testpki.Spec{Client: true, NotBefore: notBefore, NotAfter: notAfter})
}

// ValidCredential is a client certificate valid from an hour ago to an hour
// from now.
func ValidCredential(t testing.TB) Credential {
	t.Helper()
	return ClientCredential(t, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
}

// X509Gateway is the gateway "c1" (labelled env=prod, annotated
// team=platform): a direct endpoint on 127.0.0.2 verified with c's CA under
// the server name "kubernetes", through a SOCKS5 proxy, with c's client
// certificate, impersonating the caller.
func X509Gateway(c Credential) *v1alpha1.ClusterGateway {
	return &v1alpha1.ClusterGateway{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "c1",
			Labels:      map[string]string{"env": "prod"},
			Annotations: map[string]string{"team": "platform"},
		},
		Spec: v1alpha1.ClusterGatewaySpec{
			Endpoint: v1alpha1.Endpoint{
				Type:       v1alpha1.EndpointDirect,
				Address:    "https://127.0.0.2:6443",
				CABundle:   c.CAPEM,
				ServerName: "kubernetes",
				ProxyURL:   "socks5://127.0.0.1:1080",
			},
			Credential: v1alpha1.Credential{
				Type: v1alpha1.CredentialX509Certificate,
				X509: &v1alpha1.X509Credential{Certificate: c.CertPEM, PrivateKey: c.KeyPEM},
			},
			Impersonation: v1alpha1.Impersonation{Mode: v1alpha1.ImpersonationCaller},
		},
	}
}

// TokenGateway is the gateway "c2": a direct endpoint on 127.0.0.3 not
// verified, with a bearer token, not impersonating.
func TokenGateway(token string) *v1alpha1.ClusterGateway {
	return &v1alpha1.ClusterGateway{
		ObjectMeta: metav1.ObjectMeta{Name: "c2"},
		Spec: v1alpha1.ClusterGatewaySpec{
			Endpoint:      v1alpha1.Endpoint{Type: v1alpha1.EndpointDirect, Address: "https://127.0.0.3:6443", InsecureSkipTLSVerify: true},
			Credential:    v1alpha1.Credential{Type: v1alpha1.CredentialBearerToken, BearerToken: token},
			Impersonation: v1alpha1.Impersonation{Mode: v1alpha1.ImpersonationNone},
		},
	}
}

// SourceNamespace holds the credential Secrets CAPISecret makes.
const SourceNamespace = "capi-clusters"

// KubeconfigBytes is a Cluster API-style kubeconfig: server, CA and either a
// token or a client certificate, all inline.
func KubeconfigBytes(t testing.TB, server string, ca []byte, token string, cert, key []byte) []byte {
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

// KubeconfigWith is a Cluster API-style kubeconfig with extra lines in its
// user (indented under it).
func KubeconfigWith(user string) []byte {
	return []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://10.0.0.7:6443"}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
users:
- name: u
  user:
    token: kubeconfig-token
` + user)
}

// CAPISecret is a Cluster API kubeconfig Secret in SourceNamespace: name
// (the cluster's, with the suffix -kubeconfig) at resourceVersion rv.
func CAPISecret(name, rv string, kubeconfig []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: SourceNamespace, ResourceVersion: rv,
			Labels: map[string]string{"cluster.x-k8s.io/cluster-name": strings.TrimSuffix(name, "-kubeconfig")}},
		Type: "cluster.x-k8s.io/secret",
		Data: map[string][]byte{"value": kubeconfig},
	}
}

// Run runs run (a store's Run) until the test ends, when it cancels run's
// context and waits for it to return, and waits up to 30s for synced,
// failing the test with what it waited for.
func Run(t testing.TB, run func(context.Context), what string, synced func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	testpoll.EventuallyTrue(t, 30*time.Second, what, synced)
}
