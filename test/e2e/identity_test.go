package e2e

import (
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
	"github.com/clustergateway/cluster-gateway/internal/testpki"
	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// certProviderScript prints an ExecCredential with the client certificate
// and key in $CERT_FILE and $KEY_FILE.
const certProviderScript = `#!/bin/sh
pem() { /usr/bin/awk '{printf "%s\\n", $0}' "$1"; }
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"clientCertificateData":"%s","clientKeyData":"%s"}}' "$(pem "$CERT_FILE")" "$(pem "$KEY_FILE")"
`

// e2eKind is a gateway of one kind (where its credential is kept, a token
// or a client certificate, impersonation None or Caller) and what managed-1
// must see of it.
type e2eKind struct {
	gateway string
	token   string // the bearer token the cluster must get; "" for none
	cn      string // the client certificate's CN the cluster must get; "" for none
	user    string // whom managed-1 serves with the credential (None mode)
	caller  bool
}

// gatewayKinds are gateways of every kind this environment makes, to
// managed-1 through a relay that records what it receives and passes it on
// unchanged, as the same identity (captureCluster.relayTo): a stored token
// or client certificate, a token or TLS Secret read from the hub, a
// provider's token or certificate, each with impersonation None and Caller.
// The provider kinds need the gateway to run with ProvidersFile.
type gatewayKinds struct {
	relay         *captureCluster
	ProvidersFile string
	tokens        map[string]string        // by ServiceAccount of managed-1
	pairs         map[string]*testpki.Pair // by common name
	refToken      string                   // the SecretRef kinds' Secrets
	refTLS        string
	kinds         []e2eKind
}

// newGatewayKinds makes the identities on managed-1 (ServiceAccount tokens,
// cluster-admin, and client certificates in system:masters: each its own,
// all allowed to impersonate), the relay, the providers file and the
// credential Secrets; createGateways makes the gateways.
func newGatewayKinds(t *testing.T) *gatewayKinds {
	t.Helper()
	direct := managedClient(t, 0)
	dir := t.TempDir()
	write := func(name string, data []byte, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	g := &gatewayKinds{tokens: map[string]string{}, pairs: map[string]*testpki.Pair{}}
	for _, sa := range []string{"token", "ref", "prov"} {
		g.tokens[sa] = providerServiceAccount(t, direct, uniqueName(t, "id-"+sa))
	}
	certs := map[string]tls.Certificate{}
	for _, cn := range []string{"id-x509", "id-ref-tls", "id-prov-cert"} {
		p := env.Managed[0].CA.MustIssue(t, testpki.Spec{CommonName: cn, Organization: []string{"system:masters"}, Client: true})
		g.pairs[cn], certs[cn] = p, p.TLS()
	}
	g.relay = startCapture(t)
	g.relay.relayTo(t, env.Managed[0], certs)
	g.ProvidersFile = write("providers.yaml", []byte(fmt.Sprintf(`apiVersion: gateway.clustergateway.io/v1alpha1
kind: CredentialProviderConfig
providers:
- name: e2e-token
  exec:
    apiVersion: client.authentication.k8s.io/v1
    command: %s
    env:
    - {name: TOKEN_FILE, value: %s}
    - {name: ENV_DUMP, value: %s}
- name: e2e-cert
  exec:
    apiVersion: client.authentication.k8s.io/v1
    command: %s
    env:
    - {name: CERT_FILE, value: %s}
    - {name: KEY_FILE, value: %s}
`, write("token-provider", []byte(providerScript), 0o755), write("token", []byte(g.tokens["prov"]), 0o600), filepath.Join(dir, "env"),
		write("cert-provider", []byte(certProviderScript), 0o755), write("cert.crt", g.pairs["id-prov-cert"].CertPEM, 0o600), write("cert.key", g.pairs["id-prov-cert"].KeyPEM, 0o600))), 0o600)

	hub := hubAdmin(t)
	g.refToken, g.refTLS = uniqueName(t, "id-ref-token"), uniqueName(t, "id-ref-tls")
	putSourceSecret(t, hub, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: g.refToken}, Data: map[string][]byte{"token": []byte(g.tokens["ref"])}})
	putSourceSecret(t, hub, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: g.refTLS}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": g.pairs["id-ref-tls"].CertPEM, "tls.key": g.pairs["id-ref-tls"].KeyPEM}})
	return g
}

// saUser is the user name of ServiceAccount sa of namespace default.
func saUser(sa string) string { return "system:serviceaccount:default:" + sa }

// tokenUser is whom a ServiceAccount token authenticates as.
func tokenUser(t *testing.T, token string) string {
	t.Helper()
	_, payload, _ := strings.Cut(token, ".")
	payload, _, _ = strings.Cut(payload, ".")
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	var claims struct {
		Sub string `json:"sub"`
	}
	if err != nil || json.Unmarshal(raw, &claims) != nil || claims.Sub == "" {
		t.Fatalf("not a ServiceAccount token: %v", err)
	}
	return claims.Sub
}

// createGateways makes a gateway of every kind, to the relay.
func (g *gatewayKinds) createGateways(t *testing.T) {
	t.Helper()
	for _, mode := range []gatewayv1alpha1.ImpersonationMode{gatewayv1alpha1.ImpersonationNone, gatewayv1alpha1.ImpersonationCaller} {
		add := func(kind string, k e2eKind, cred gatewayv1alpha1.Credential) {
			k.gateway, k.caller = uniqueName(t, "id-"+kind+"-"+strings.ToLower(string(mode))), mode == gatewayv1alpha1.ImpersonationCaller
			createGateway(t, &gatewayv1alpha1.ClusterGateway{
				ObjectMeta: metav1.ObjectMeta{Name: k.gateway},
				Spec: gatewayv1alpha1.ClusterGatewaySpec{
					Endpoint:      gatewayv1alpha1.Endpoint{Address: g.relay.URL, CABundle: g.relay.CAPEM},
					Credential:    cred,
					Impersonation: gatewayv1alpha1.Impersonation{Mode: mode},
				},
			})
			g.kinds = append(g.kinds, k)
		}
		ref := func(name string) *gatewayv1alpha1.SecretReference {
			return &gatewayv1alpha1.SecretReference{Namespace: localenv.GatewayNamespace, Name: name}
		}
		token := func(sa string) e2eKind { return e2eKind{token: g.tokens[sa], user: tokenUser(t, g.tokens[sa])} }
		x509 := g.pairs["id-x509"]
		add("token", token("token"), gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialBearerToken, BearerToken: g.tokens["token"]})
		add("x509", e2eKind{cn: "id-x509", user: "id-x509"}, gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialX509Certificate,
			X509: &gatewayv1alpha1.X509Credential{Certificate: x509.CertPEM, PrivateKey: x509.KeyPEM}})
		add("ref-token", token("ref"), gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialSecretRef, SecretRef: ref(g.refToken)})
		add("ref-tls", e2eKind{cn: "id-ref-tls", user: "id-ref-tls"}, gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialSecretRef, SecretRef: ref(g.refTLS)})
		add("prov-token", token("prov"), gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialProvider,
			Provider: &gatewayv1alpha1.ProviderReference{Name: "e2e-token"}})
		add("prov-cert", e2eKind{cn: "id-prov-cert", user: "id-prov-cert"}, gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialProvider,
			Provider: &gatewayv1alpha1.ProviderReference{Name: "e2e-cert"}})
	}
}

// material is the credential material of every kind, for log searches.
func (g *gatewayKinds) material() [][]byte {
	var out [][]byte
	for _, tok := range g.tokens {
		out = append(out, []byte(tok))
	}
	for _, p := range g.pairs {
		out = append(out, p.KeyPEM)
	}
	return out
}

// checkDirectBearerCaller sends, through each gateway, a SelfSubjectReview
// straight to the gateway's port (not through the hub) as a hub
// ServiceAccount that authenticates with its bearer token (callerToken;
// user name and UID as the hub knows it), with a cookie and front-proxy
// headers of its own. Managed-1 must have served the credential's identity,
// or the caller in Caller mode; the relay must have received exactly the
// gateway's identity headers and client certificate, and nothing of the
// caller's own.
func (g *gatewayKinds) checkDirectBearerCaller(t *testing.T, callerToken, callerUser, callerUID string) {
	// What must never reach a cluster: the caller's token, cookie and
	// claimed front-proxy identity.
	leaks := []string{callerToken, "session=hub-e2e", "mallory", "system:masters"}
	request := fmt.Sprintf("Host: %s\r\nAuthorization: Bearer %s\r\nCookie: session=hub-e2e\r\nX-Remote-User: mallory\r\nX-Remote-Group: system:masters\r\n"+
		"X-Remote-Extra-Scopes: all\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", hostOf(env.Gateway.URL), callerToken, len(ssrBody), ssrBody)
	for _, k := range g.kinds {
		t.Run(k.gateway, func(t *testing.T) {
			var r rawResponse
			var got []capturedRequest
			eventually(t, "a SelfSubjectReview through "+k.gateway+" straight to the gateway", func() error {
				n := len(g.relay.requests())
				r = rawRequest(t, hostOf(env.Gateway.URL), env.Gateway.CA.CertPEM, nil,
					"POST "+proxyPath(k.gateway, "/apis/authentication.k8s.io/v1/selfsubjectreviews")+" HTTP/1.1\r\n"+request)
				if got = g.relay.since(n); r.Code != http.StatusCreated || len(got) != 1 {
					return fmt.Errorf("%d %s; the relay received %d requests", r.Code, r.Body, len(got))
				}
				return nil
			})
			u, err := reviewedUser(r)
			if err != nil {
				t.Fatalf("SelfSubjectReview: %v", err)
			}
			want := k.user
			if k.caller {
				want = callerUser
			}
			if u.Username != want || (k.caller && slices.Contains(u.Groups, "system:masters")) {
				t.Errorf("managed-1 served %q in %v, want %q", u.Username, u.Groups, want)
			}

			at := got[0]
			wantHeaders := map[string][]string{}
			if k.token != "" {
				wantHeaders["Authorization"] = []string{"Bearer " + k.token}
			}
			if k.caller {
				wantHeaders["Impersonate-User"] = []string{callerUser}
				wantHeaders["Impersonate-Uid"] = []string{callerUID}
				wantHeaders["Impersonate-Group"] = []string{"system:serviceaccounts", "system:serviceaccounts:default"}
			}
			if h := identityAt(at); fmt.Sprint(h) != fmt.Sprint(wantHeaders) {
				t.Errorf("identity headers at the cluster\n got %v\nwant %v", h, wantHeaders)
			}
			if at.ClientCN != k.cn {
				t.Errorf("client certificate at the cluster: CN %q, want %q", at.ClientCN, k.cn)
			}
			for name, vs := range at.Header {
				for _, v := range vs {
					for _, l := range leaks {
						if strings.Contains(v, l) {
							t.Errorf("the cluster received %s: %q, which carries the caller's %q", name, v, l)
						}
					}
				}
			}
		})
	}
}
