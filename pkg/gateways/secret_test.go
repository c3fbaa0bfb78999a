package gateways

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clustergateway/cluster-gateway/internal/testgateways"
	"github.com/clustergateway/cluster-gateway/internal/testpki"
	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

const testNamespace = "cluster-gateway-system"

func mustToSecret(t *testing.T, gw *v1alpha1.ClusterGateway, existing *corev1.Secret) *corev1.Secret {
	t.Helper()
	s, err := toSecret(gw, existing, testNamespace)
	if err != nil {
		t.Fatalf("toSecret: %v", err)
	}
	return s
}

func ready(t *testing.T, gw *v1alpha1.ClusterGateway) metav1.Condition {
	t.Helper()
	for _, c := range gw.Status.Conditions {
		if c.Type == v1alpha1.ConditionReady {
			return c
		}
	}
	t.Fatalf("gateway %s has no Ready condition: %+v", gw.Name, gw.Status)
	return metav1.Condition{}
}

// What is written to the Secret reads back as the same gateway, and the
// Secret's own label stays internal.
func TestSecretRoundTrip(t *testing.T) {
	c := testgateways.ValidCredential(t)
	for _, gw := range []*v1alpha1.ClusterGateway{testgateways.X509Gateway(c), testgateways.TokenGateway("s3cr3t-token")} {
		t.Run(gw.Name, func(t *testing.T) {
			s := mustToSecret(t, gw, nil)
			if s.Namespace != testNamespace || s.Name != gw.Name || s.Labels[LabelGateway] != "true" || s.Type != corev1.SecretTypeOpaque {
				t.Fatalf("Secret %s/%s labels %v type %q: want %s/%s, %s=true, Opaque", s.Namespace, s.Name, s.Labels, s.Type, testNamespace, gw.Name, LabelGateway)
			}
			// Controllers act on Secret metadata: none of the gateway's is on it.
			if len(s.Labels) != 1 || len(s.Annotations) != 0 {
				t.Fatalf("the Secret carries the gateway's metadata: labels %v annotations %v", s.Labels, s.Annotations)
			}
			got := Parse(s).Object
			if !equality.Semantic.DeepEqual(got.Spec, gw.Spec) {
				t.Errorf("spec after the round trip:\n got %+v\nwant %+v", got.Spec, gw.Spec)
			}
			if !equality.Semantic.DeepEqual(got.Labels, gw.Labels) || !equality.Semantic.DeepEqual(got.Annotations, gw.Annotations) {
				t.Errorf("metadata after the round trip: labels %v annotations %v, want %v and %v", got.Labels, got.Annotations, gw.Labels, gw.Annotations)
			}
			if r := ready(t, got); r.Status != metav1.ConditionTrue {
				t.Errorf("Ready = %s (%s: %s), want True", r.Status, r.Reason, r.Message)
			}
		})
	}
}

// Rewriting a Secret keeps keys the gateway does not model, and switching the
// credential type leaves no stale material behind.
func TestToSecretKeepsUnknownKeysDropsStaleMaterial(t *testing.T) {
	c := testgateways.ValidCredential(t)
	s := mustToSecret(t, testgateways.X509Gateway(c), nil)
	s.Data["note"] = []byte("kept")
	s.StringData = map[string]string{KeyToken: "stale"}
	gw := testgateways.TokenGateway("new-token")
	gw.Name = s.Name
	s2 := mustToSecret(t, gw, s)
	if string(s2.Data["note"]) != "kept" {
		t.Errorf("unknown key lost: %v", keys(s2.Data))
	}
	for _, k := range []string{KeyCertificate, KeyPrivateKey, KeyCABundle, KeyProxyURL, KeyServerName} {
		if _, ok := s2.Data[k]; ok {
			t.Errorf("data[%s] survived the switch to a token gateway", k)
		}
	}
	if _, ok := s2.StringData[KeyToken]; ok {
		t.Errorf("stringData[%s] survived: it would overwrite the token on write", KeyToken)
	}
	if string(s2.Data[KeyToken]) != "new-token" || string(s2.Data[KeyInsecure]) != "true" {
		t.Errorf("token %q insecure %q, want new-token and true", s2.Data[KeyToken], s2.Data[KeyInsecure])
	}
}

// Credential material never comes back out: not in the redacted object, not
// in kubectl's last-applied annotation stored beside it.
func TestRedaction(t *testing.T) {
	c := testgateways.ValidCredential(t)
	const token = "tok-ABCDEFGH-123456"
	gw := testgateways.X509Gateway(c)
	applied := testgateways.X509Gateway(c)
	applied.Spec.Credential.BearerToken = token // whatever a client sent
	raw, err := json.Marshal(applied)
	if err != nil {
		t.Fatal(err)
	}
	gw.Annotations[corev1.LastAppliedConfigAnnotation] = string(raw)

	s := mustToSecret(t, gw, nil)
	if len(s.Annotations) != 0 {
		t.Errorf("the gateway's annotations were stored as the Secret's own: %v", s.Annotations)
	}
	var ann map[string]string
	if err := json.Unmarshal(s.Data[KeyAnnotations], &ann); err != nil {
		t.Fatalf("data[%s]: %v", KeyAnnotations, err)
	}
	stored := ann[corev1.LastAppliedConfigAnnotation]
	if stored == "" || !json.Valid([]byte(stored)) {
		t.Fatalf("stored last-applied %q: want the redacted JSON", stored)
	}

	out := redact(Parse(s).Object)
	if out.Spec.Credential.X509 != nil || out.Spec.Credential.BearerToken != "" {
		t.Errorf("redact left material: %+v", out.Spec.Credential)
	}
	if out.Annotations[corev1.LastAppliedConfigAnnotation] != stored {
		t.Errorf("last-applied read back as %q, want %q", out.Annotations[corev1.LastAppliedConfigAnnotation], stored)
	}
	js, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, needle := range needles(token, c.CertPEM, c.KeyPEM) {
		if strings.Contains(string(js), needle) {
			t.Errorf("redacted gateway contains credential material %q:\n%s", needle, js)
		}
	}
	if gw.Spec.Credential.X509 == nil {
		t.Errorf("redact changed its input")
	}
	if got := redactLastApplied("{not json"); got != "" {
		t.Errorf("redactLastApplied of malformed JSON = %q, want empty (never store what could not be cleaned)", got)
	}
}

// needles are forms in which material could show up in JSON: raw, and the
// base64 of []byte fields (a line of it is enough to spot).
func needles(token string, material ...[]byte) []string {
	out := []string{token}
	for _, m := range material {
		// From the middle: every PEM certificate starts alike.
		b64 := base64.StdEncoding.EncodeToString(m)
		out = append(out, b64[len(b64)/2:len(b64)/2+40])
		lines := strings.Split(strings.TrimSpace(string(m)), "\n")
		if len(lines) > 2 {
			out = append(out, lines[1])
		}
	}
	return out
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A Secret written by hand may hold anything: it still reads as a gateway,
// Ready=False says what is wrong, and nothing panics.
func TestMalformedSecrets(t *testing.T) {
	c := testgateways.ValidCredential(t)
	expired := testgateways.ClientCredential(t, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
	good := func() map[string][]byte {
		return map[string][]byte{
			KeyEndpoint: []byte("https://127.0.0.2:6443"), KeyCABundle: c.CAPEM,
			KeyCredentialType: []byte(v1alpha1.CredentialX509Certificate), KeyCertificate: c.CertPEM, KeyPrivateKey: c.KeyPEM,
		}
	}
	with := func(k string, v []byte) map[string][]byte {
		d := good()
		if v == nil {
			delete(d, k)
		} else {
			d[k] = v
		}
		return d
	}
	cases := []struct {
		name   string
		data   map[string][]byte
		ann    map[string]string
		reason string
		want   string // in the message
	}{
		{name: "no data", data: nil, reason: v1alpha1.ReasonInvalidSecret, want: "spec.endpoint.address"},
		{name: "insecure not a bool", data: with(KeyInsecure, []byte("maybe")), reason: v1alpha1.ReasonInvalidSecret, want: KeyInsecure},
		{name: "http endpoint", data: with(KeyEndpoint, []byte("http://127.0.0.2")), reason: v1alpha1.ReasonInvalidSecret, want: "https"},
		{name: "endpoint with user info", data: with(KeyEndpoint, []byte("https://u:p@127.0.0.2")), reason: v1alpha1.ReasonInvalidSecret, want: "user info"},
		{name: "certificate without key", data: with(KeyPrivateKey, nil), reason: v1alpha1.ReasonInvalidSecret, want: "privateKey"},
		{name: "key without certificate", data: with(KeyCertificate, nil), reason: v1alpha1.ReasonInvalidSecret, want: "certificate"},
		{name: "garbage PEM", data: with(KeyCertificate, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")), reason: v1alpha1.ReasonInvalidSecret, want: "x509"},
		{name: "mismatched key", data: with(KeyPrivateKey, expired.KeyPEM), reason: v1alpha1.ReasonInvalidSecret, want: "x509"},
		{name: "CA bundle without certificates", data: with(KeyCABundle, []byte("not pem")), reason: v1alpha1.ReasonInvalidSecret, want: "caBundle"},
		{name: "CA bundle and insecure", data: with(KeyInsecure, []byte("true")), reason: v1alpha1.ReasonInvalidSecret, want: "insecureSkipTLSVerify"},
		{name: "unknown endpoint type", data: with(KeyEndpointType, []byte("Tunnel")), reason: v1alpha1.ReasonInvalidSecret, want: "spec.endpoint.type"},
		{name: "konnectivity with proxy", data: func() map[string][]byte {
			d := with(KeyEndpointType, []byte("Konnectivity"))
			d[KeyProxyURL] = []byte("http://127.0.0.1:3128")
			return d
		}(), reason: v1alpha1.ReasonInvalidSecret, want: "proxyURL"},
		{name: "no credential type", data: with(KeyCredentialType, nil), reason: v1alpha1.ReasonInvalidSecret, want: "spec.credential.type"},
		{name: "token type without token", data: with(KeyCredentialType, []byte(v1alpha1.CredentialBearerToken)), reason: v1alpha1.ReasonInvalidSecret, want: "bearerToken"},
		{name: "unknown impersonation", data: with(KeyImpersonation, []byte("Everyone")), reason: v1alpha1.ReasonInvalidSecret, want: "impersonation"},
		{name: "proxy scheme", data: with(KeyProxyURL, []byte("ftp://127.0.0.1:21")), reason: v1alpha1.ReasonInvalidSecret, want: "proxyURL"},
		// A '/' in a password ends the authority early: no user info parsed.
		{name: "endpoint with an unescaped password", data: with(KeyEndpoint, []byte("https://u:/p@127.0.0.2")), reason: v1alpha1.ReasonInvalidSecret, want: "user info"},
		{name: "proxy with an unescaped password", data: with(KeyProxyURL, []byte("http://u:/pw@127.0.0.1:3128")), reason: v1alpha1.ReasonInvalidSecret, want: "percent-encode"},
		{name: "proxy with a path", data: with(KeyProxyURL, []byte("http://127.0.0.1:3128/x")), reason: v1alpha1.ReasonInvalidSecret, want: "without a path"},
		// A Secret written past the API carries no more than the API takes.
		{name: "provider args not a list", data: providerData(KeyProviderArgs, `"--cluster prod"`), reason: v1alpha1.ReasonInvalidSecret, want: KeyProviderArgs},
		{name: "provider env not a list", data: providerData(KeyProviderEnv, `{"REGION":"eu"}`), reason: v1alpha1.ReasonInvalidSecret, want: KeyProviderEnv},
		{name: "provider env LD_PRELOAD", data: providerData(KeyProviderEnv, `[{"name":"LD_PRELOAD","value":"/tmp/x.so"}]`), reason: v1alpha1.ReasonInvalidSecret, want: "additionalEnv[0].name"},
		{name: "provider arg with NUL", data: providerData(KeyProviderArgs, `["a\u0000b"]`), reason: v1alpha1.ReasonInvalidSecret, want: "additionalArgs[0]"},
		{name: "expired certificate", data: map[string][]byte{
			KeyEndpoint: []byte("https://127.0.0.2:6443"), KeyCredentialType: []byte(v1alpha1.CredentialX509Certificate),
			KeyCertificate: expired.CertPEM, KeyPrivateKey: expired.KeyPEM,
		}, reason: v1alpha1.ReasonCertExpired, want: "expired"},
		{name: "managed fields not JSON", data: with(KeyManagedFields, []byte("{[")), reason: v1alpha1.ReasonValid},
		{name: "Secret annotations are not the gateway's", data: good(), ann: map[string]string{"anything": "{["}, reason: v1alpha1.ReasonValid},
		{name: "labels not JSON", data: with(KeyLabels, []byte("env=prod")), reason: v1alpha1.ReasonInvalidSecret, want: KeyLabels},
		{name: "label value invalid", data: with(KeyLabels, []byte(`{"env":"not a label value!"}`)), reason: v1alpha1.ReasonInvalidSecret, want: "metadata.labels"},
		{name: "annotations not strings", data: with(KeyAnnotations, []byte(`{"a":1}`)), reason: v1alpha1.ReasonInvalidSecret, want: KeyAnnotations},
		{name: "token with a control character", data: func() map[string][]byte {
			d := with(KeyCredentialType, []byte(v1alpha1.CredentialBearerToken))
			delete(d, KeyCertificate)
			delete(d, KeyPrivateKey)
			d[KeyToken] = []byte("abc\x01def")
			return d
		}(), reason: v1alpha1.ReasonInvalidSecret, want: "control characters"},
		{name: "server-only certificate", data: func() map[string][]byte {
			so := testgateways.NewCredential(t, testpki.Spec{Server: true})
			d := with(KeyCertificate, so.CertPEM)
			d[KeyPrivateKey] = so.KeyPEM
			return d
		}(), reason: v1alpha1.ReasonInvalidSecret, want: "clientAuth"},
		{name: "certificate not valid yet", data: func() map[string][]byte {
			future := testgateways.ClientCredential(t, time.Now().Add(time.Hour), time.Now().Add(2*time.Hour))
			d := with(KeyCertificate, future.CertPEM)
			d[KeyPrivateKey] = future.KeyPEM
			return d
		}(), reason: v1alpha1.ReasonCertNotYetValid, want: "not valid before"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: testNamespace, ResourceVersion: "7", Annotations: tc.ann, Labels: map[string]string{LabelGateway: "true"}},
				Data:       tc.data,
			}
			g := Parse(s)
			r := ready(t, g.Object)
			if tc.reason == v1alpha1.ReasonValid {
				if !g.Ready || r.Status != metav1.ConditionTrue || g.Address == nil {
					t.Fatalf("Ready=%v (%s: %s), address %v; want a usable gateway", g.Ready, r.Reason, r.Message, g.Address)
				}
				return
			}
			if g.Ready || r.Status != metav1.ConditionFalse || g.Problem == "" {
				t.Fatalf("Ready=%v, condition %s (%s: %s), problem %q; want Ready=False with a problem", g.Ready, r.Status, r.Reason, r.Message, g.Problem)
			}
			if tc.reason != "" && r.Reason != tc.reason {
				t.Errorf("reason %q, want %q (%s)", r.Reason, tc.reason, r.Message)
			}
			if !strings.Contains(r.Message, tc.want) || g.Problem != r.Message {
				t.Errorf("message %q (problem %q): want it to mention %q", r.Message, g.Problem, tc.want)
			}
		})
	}
}

// A usable gateway has its address and proxy URL parsed once, here.
func TestParseGatewayParsesAddresses(t *testing.T) {
	g := Parse(mustToSecret(t, testgateways.X509Gateway(testgateways.ValidCredential(t)), nil))
	if !g.Ready || g.Address == nil || g.Address.Host != "127.0.0.2:6443" || g.ProxyURL == nil || g.ProxyURL.Scheme != "socks5" {
		t.Fatalf("Ready=%v problem %q address %v proxy %v", g.Ready, g.Problem, g.Address, g.ProxyURL)
	}
}

// Additional addresses are stored one a line, read back in order, parsed
// when the gateway is Ready, and part of how the gateway reaches its
// cluster (SameTransport).
func TestAdditionalAddressesRoundTrip(t *testing.T) {
	gw := testgateways.X509Gateway(testgateways.ValidCredential(t))
	gw.Spec.Endpoint.AdditionalAddresses = []string{"https://127.0.0.3:6443", "https://127.0.0.4:6443"}
	s := mustToSecret(t, gw, nil)
	if got := string(s.Data[KeyMoreEndpoints]); got != "https://127.0.0.3:6443\nhttps://127.0.0.4:6443" {
		t.Fatalf("data[%s] = %q", KeyMoreEndpoints, got)
	}
	g := Parse(s)
	if !g.Ready || len(g.AdditionalAddresses) != 2 || g.AdditionalAddresses[1].Host != "127.0.0.4:6443" {
		t.Fatalf("Ready=%v problem %q additional %v", g.Ready, g.Problem, g.AdditionalAddresses)
	}
	if !equality.Semantic.DeepEqual(g.Object.Spec.Endpoint.AdditionalAddresses, gw.Spec.Endpoint.AdditionalAddresses) {
		t.Fatalf("spec after the round trip: %v", g.Object.Spec.Endpoint.AdditionalAddresses)
	}
	gw.Spec.Endpoint.AdditionalAddresses = gw.Spec.Endpoint.AdditionalAddresses[:1]
	if SameTransport(g, Parse(mustToSecret(t, gw, s))) {
		t.Fatal("dropping an additional address is the same transport")
	}
	gw.Spec.Endpoint.AdditionalAddresses = nil
	if s2 := mustToSecret(t, gw, s); len(s2.Data[KeyMoreEndpoints]) != 0 {
		t.Fatalf("no additional addresses left data[%s] = %q", KeyMoreEndpoints, s2.Data[KeyMoreEndpoints])
	}
}

// providerData is a Provider gateway's Secret data with key set to value.
func providerData(key, value string) map[string][]byte {
	return map[string][]byte{
		KeyEndpoint: []byte("https://127.0.0.2:6443"), KeyInsecure: []byte("true"),
		KeyCredentialType: []byte(v1alpha1.CredentialProvider), KeyProvider: []byte("eks"), key: []byte(value),
	}
}

// A Provider gateway's additional args and environment (KEP-5339's
// ClusterProfile extensions) are stored and read back as written; without
// them the Secret has neither key.
func TestProviderAdditionalArgsAndEnvRoundTrip(t *testing.T) {
	gw := testgateways.X509Gateway(testgateways.ValidCredential(t))
	gw.Spec.Credential = v1alpha1.Credential{Type: v1alpha1.CredentialProvider, Provider: &v1alpha1.ProviderReference{Name: "eks",
		AdditionalArgs: []string{"--cluster", "prod"},
		AdditionalEnv:  []v1alpha1.ProviderEnvVar{{Name: "REGION", Value: "eu-west-1"}, {Name: "AWS_PROFILE", Value: "fleet"}}}}
	s := mustToSecret(t, gw, nil)
	got := Parse(s).Object
	if !equality.Semantic.DeepEqual(got.Spec.Credential, gw.Spec.Credential) {
		t.Fatalf("credential after the round trip: %+v, want %+v", got.Spec.Credential.Provider, gw.Spec.Credential.Provider)
	}
	gw.Spec.Credential.Provider.AdditionalArgs, gw.Spec.Credential.Provider.AdditionalEnv = nil, nil
	s = mustToSecret(t, gw, s)
	if _, ok := s.Data[KeyProviderArgs]; ok {
		t.Errorf("no args left data[%s] = %q", KeyProviderArgs, s.Data[KeyProviderArgs])
	}
	if _, ok := s.Data[KeyProviderEnv]; ok {
		t.Errorf("no env left data[%s] = %q", KeyProviderEnv, s.Data[KeyProviderEnv])
	}
}
