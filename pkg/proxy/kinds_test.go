package proxy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
	"github.com/clustergateway/cluster-gateway/internal/testpoll"
	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
)

// gatewayKind is one configuration a gateway's identity can come from: a
// credential type (where the credential is kept, and whether it is a token
// or a client certificate) with an impersonation mode, and what its cluster
// must see. A security property of the request path holds for every kind or
// is not proven: X.509, which `join` stores by default, carries no token.
type gatewayKind struct {
	gateway string
	token   string // the bearer token the cluster must get; "" for none
	cn      string // the client certificate's CN the cluster must get; "" for none
	caller  bool   // spec.impersonation.mode Caller
}

// callerFor is the hub caller the cluster must be asked to act for: u in
// Caller mode, nil otherwise.
func (k gatewayKind) callerFor(u user.Info) user.Info {
	if k.caller {
		return u
	}
	return nil
}

// want checks that r, as the cluster received it, carries exactly k's
// identity as u's request: the token (or none), the impersonation (or
// none), and the client certificate (or none).
func (k gatewayKind) want(t *testing.T, r *http.Request, u user.Info) {
	t.Helper()
	wantIdentity(t, r.Header, k.token, k.callerFor(u))
	cn := ""
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		cn = r.TLS.PeerCertificates[0].Subject.CommonName
	}
	if cn != k.cn {
		t.Errorf("client certificate at the cluster: CN %q, want %q", cn, k.cn)
	}
}

// kindsFixture is one cluster (a capture that asks for client
// certificates) reached by a gateway of every kind.
type kindsFixture struct {
	up    *capture
	px    *Proxy
	kinds []gatewayKind
}

// sourceNamespace holds the credential Secrets of the SecretRef kinds.
const sourceNamespace = "credential-sources"

// newKindsFixture is a proxy with a gateway of every kind to one capture:
// a stored token, a stored client certificate, a token and a TLS Secret
// read from a credential source, and a provider's token and certificate
// (pkg/credentials' test provider, run by the real launcher), each with
// impersonation None and Caller. Every gateway has answered once when it
// returns.
func newKindsFixture(t testing.TB) *kindsFixture {
	t.Helper()
	up := newCaptureAsking(t, tls.RequestClientCert)
	clientCA := testpki.MustCA(t, "gateway-client-ca")
	issue := func(cn string) *testpki.Pair {
		return clientCA.MustIssue(t, testpki.Spec{CommonName: cn, Client: true})
	}
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	providerCert := issue("provider-cert")
	bin := buildTestProvider(t)
	providers := startProviders(t, write("providers.yaml", []byte(fmt.Sprintf(`apiVersion: gateway.clustergateway.io/v1alpha1
kind: CredentialProviderConfig
providers:
- name: token
  exec:
    apiVersion: client.authentication.k8s.io/v1
    command: %s
    env:
    - {name: PROVIDER_TOKEN, value: provider-token}
- name: cert
  exec:
    apiVersion: client.authentication.k8s.io/v1
    command: %s
    env:
    - {name: PROVIDER_CERT_FILE, value: %s}
    - {name: PROVIDER_KEY_FILE, value: %s}
`, bin, bin, write("provider.crt", providerCert.CertPEM), write("provider.key", providerCert.KeyPEM)))))

	refTLS := issue("ref-tls")
	objs := []runtime.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ref-token", Namespace: sourceNamespace, ResourceVersion: "1"},
			Data: map[string][]byte{v1alpha1.SecretKeyToken: []byte("ref-token")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ref-tls", Namespace: sourceNamespace, ResourceVersion: "1"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{v1alpha1.SecretKeyCert: refTLS.CertPEM, v1alpha1.SecretKeyKey: refTLS.KeyPEM}},
	}
	f := &kindsFixture{up: up}
	for _, mode := range []string{"None", "Caller"} {
		caller := mode == "Caller"
		add := func(kind, token, cn string, data map[string][]byte) {
			k := gatewayKind{gateway: kind + "-" + strings.ToLower(mode), token: token, cn: cn, caller: caller}
			data[gateways.KeyEndpoint] = []byte(up.srv.URL)
			data[gateways.KeyCABundle] = upstreamCA(up.srv)
			data[gateways.KeyImpersonation] = []byte(mode)
			objs = append(objs, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: k.gateway, Namespace: fixtureNamespace, ResourceVersion: "1", UID: types.UID("uid-" + k.gateway),
					Labels: map[string]string{gateways.LabelGateway: "true"}},
				Data: data,
			})
			f.kinds = append(f.kinds, k)
		}
		x509 := issue("x509-" + mode)
		add("token", "token-"+mode, "", map[string][]byte{gateways.KeyCredentialType: []byte("BearerToken"), gateways.KeyToken: []byte("token-" + mode)})
		add("x509", "", "x509-"+mode, map[string][]byte{gateways.KeyCredentialType: []byte("X509Certificate"),
			gateways.KeyCertificate: x509.CertPEM, gateways.KeyPrivateKey: x509.KeyPEM})
		add("secretref-token", "ref-token", "", map[string][]byte{gateways.KeyCredentialType: []byte("SecretRef"),
			gateways.KeySourceNamespace: []byte(sourceNamespace), gateways.KeySourceName: []byte("ref-token")})
		add("secretref-tls", "", "ref-tls", map[string][]byte{gateways.KeyCredentialType: []byte("SecretRef"),
			gateways.KeySourceNamespace: []byte(sourceNamespace), gateways.KeySourceName: []byte("ref-tls")})
		add("provider-token", "provider-token", "", map[string][]byte{gateways.KeyCredentialType: []byte("Provider"), gateways.KeyProvider: []byte("token")})
		add("provider-cert", "", "provider-cert", map[string][]byte{gateways.KeyCredentialType: []byte("Provider"), gateways.KeyProvider: []byte("cert")})
	}

	store := gateways.NewStore(fake.NewClientset(objs...), fixtureNamespace, sourceNamespace)
	runGatewayStore(t, store)
	var err error
	f.px, err = newWiredProviders(t, store, providers, Config{Pool: newTestPool(t, 16, 2*time.Second, nil), Authorizer: authorizerfactory.NewAlwaysAllowAuthorizer()})
	if err != nil {
		t.Fatal(err)
	}
	// Every gateway answers once (a provider's first run takes a while:
	// all at once).
	errs := make([]error, len(f.kinds))
	var wg sync.WaitGroup
	for i, k := range f.kinds {
		wg.Go(func() {
			errs[i] = testpoll.Until(30*time.Second, k.gateway+" answers", func() error {
				if rec := serveAs(f.px, k.gateway, "/api", alice, httptest.NewRequest(http.MethodGet, "/x", nil)); rec.Code != http.StatusOK {
					return fmt.Errorf("%d %s", rec.Code, rec.Body)
				}
				return nil
			})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return f
}
