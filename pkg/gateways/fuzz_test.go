package gateways

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// FuzzFromSecret feeds arbitrary Secret contents to the read path the proxy
// uses on every resourceVersion. Invariants: no panic; Ready implies a
// parsed address and a valid spec; redaction removes all material; and
// writing the gateway back gives a Secret that reads as the same spec
// and is still usable if it was.
// Fuzz it with: go test -run XXX -fuzz FuzzFromSecret -fuzztime 1m -fuzzminimizetime 5s ./pkg/registry/clustergateway/
// (minimizing a new input with 13 arguments takes long: 0 execs/sec meanwhile is not a hang).
func FuzzFromSecret(f *testing.F) {
	c := validCredential(f)
	seed := func(epType, endpoint string, ca []byte, insecure, proxy, credType string, cert, key []byte, token, imp, managedFields, lastApplied string) {
		f.Add(epType, endpoint, ca, "", insecure, proxy, credType, cert, key, token, imp, managedFields, lastApplied)
	}
	seed("", "https://127.0.0.2:6443", c.caPEM, "", "", "X509Certificate", c.certPEM, c.keyPEM, "", "", "", "")
	seed("Direct", " https://127.0.0.2:6443\n", nil, "true", "socks5://127.0.0.1:1080", "BearerToken", nil, nil, " tok\n", "Caller", `[{"manager":"kubectl"}]`, `{"kubectl.kubernetes.io/last-applied-configuration":"{\"spec\":{\"credential\":{\"bearerToken\":\"x\"}}}"}`)
	seed("Konnectivity", "https://10.0.0.1", c.caPEM, "maybe", "http://user:pw@proxy:3128", "X509Certificate", c.certPEM, nil, "tok", "None", "{[", "{not json")
	seed("Tunnel", "http://x", []byte("not pem"), "1", "ftp://x", "", []byte("-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n"), c.keyPEM, "", "Everyone", "", "")

	f.Fuzz(func(t *testing.T, epType, endpoint string, ca []byte, serverName, insecure, proxy, credType string, cert, key []byte, token, imp, managedFields, annotations string) {
		data := map[string][]byte{}
		put := func(k string, v []byte) {
			if len(v) > 0 {
				data[k] = v
			}
		}
		put(KeyEndpointType, []byte(epType))
		put(KeyEndpoint, []byte(endpoint))
		put(KeyCABundle, ca)
		put(KeyServerName, []byte(serverName))
		put(KeyInsecure, []byte(insecure))
		put(KeyProxyURL, []byte(proxy))
		put(KeyCredentialType, []byte(credType))
		put(KeyCertificate, cert)
		put(KeyPrivateKey, key)
		put(KeyToken, []byte(token))
		put(KeyImpersonation, []byte(imp))
		put(KeyManagedFields, []byte(managedFields))
		put(KeyAnnotations, []byte(annotations))
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name: "fuzz", Namespace: testNamespace, ResourceVersion: "1", Labels: map[string]string{LabelGateway: "true"},
			},
			Data: data,
		}

		g := Parse(s)
		if g.Ready {
			if g.Address == nil {
				t.Fatalf("Ready without a parsed address")
			}
			if errs := v1alpha1.ValidateClusterGateway(g.Object); len(errs) > 0 {
				t.Fatalf("Ready but invalid: %v", errs)
			}
		} else if g.Problem == "" {
			t.Fatalf("not Ready and no problem given")
		}
		if r := redact(g.Object); r.Spec.Credential.X509 != nil || r.Spec.Credential.BearerToken != "" || v1alpha1.ProxyUserInfo(r.Spec.Endpoint.ProxyURL) != nil {
			t.Fatalf("redact left material: %+v, proxy %q", r.Spec.Credential, r.Spec.Endpoint.ProxyURL)
		} else if la, ok := r.Annotations[corev1.LastAppliedConfigAnnotation]; ok && la != "" {
			var obj struct {
				Spec struct {
					Credential map[string]any `json:"credential"`
				} `json:"spec"`
			}
			if err := json.Unmarshal([]byte(la), &obj); err != nil {
				t.Fatalf("redacted last-applied is not JSON: %q", la)
			}
			if _, has := obj.Spec.Credential["bearerToken"]; has {
				t.Fatalf("redact left a token in the last-applied annotation: %q", la)
			}
			if _, has := obj.Spec.Credential["x509"]; has {
				t.Fatalf("redact left x509 material in the last-applied annotation: %q", la)
			}
		}

		s2, err := toSecret(g.Object, s, testNamespace)
		if err != nil {
			t.Fatalf("toSecret of a gateway read from a Secret: %v", err)
		}
		again := Parse(s2).Object
		if !equality.Semantic.DeepEqual(again.Spec, g.Object.Spec) {
			t.Fatalf("spec changed on a write-back:\nfirst  %+v\nsecond %+v", g.Object.Spec, again.Spec)
		}
		if r1, r2 := redact(g.Object), redact(again); !equality.Semantic.DeepEqual(r2.Labels, r1.Labels) || !equality.Semantic.DeepEqual(r2.Annotations, r1.Annotations) {
			t.Fatalf("metadata changed on a write-back: labels %v -> %v, annotations %v -> %v", g.Object.Labels, again.Labels, g.Object.Annotations, again.Annotations)
		}
		if len(s2.Annotations) != 0 || len(s2.Labels) != 1 {
			t.Fatalf("the Secret carries metadata beyond the gateway label: labels %v annotations %v", s2.Labels, s2.Annotations)
		}
		// A write-back may heal a malformed value that the spec cannot
		// express (e.g. insecure-skip-tls-verify: "maybe" reads as false),
		// but must never break a usable gateway.
		if g.Ready && !Parse(s2).Ready {
			t.Fatalf("a usable gateway became unusable on a write-back: %s", Parse(s2).Problem)
		}
	})
}
