package gateways

import (
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clustergateway/cluster-gateway/internal/testgateways"
	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/boundedyaml"
)

// tokenCanary is put into every fuzzed token; secretOwnKey is a label and
// annotation of the Secret itself.
const (
	tokenCanary  = "CANARY-7f3a9c"
	secretOwnKey = "argocd.argoproj.io/secret-type"
)

// FuzzFromSecret feeds arbitrary Secret contents to the read path the proxy
// uses on every resourceVersion. Invariants: no panic; Ready implies a
// parsed address and a valid spec; redaction removes all material (the
// proxy's user info included), and no part of the public object, status
// messages included, echoes the token or the private key; the gateway's
// labels and annotations are exactly the JSON objects in the data keys
// (a value that is not one makes it not Ready, naming the key), never the
// Secret's own metadata; and writing the gateway back gives a Secret that
// reads as the same spec, labels, annotations and field ownership, keeps
// the Secret's own metadata, and is still usable if it was.
// Fuzz it with: go test -run '^$' -fuzz FuzzFromSecret -fuzztime 1m -fuzzminimizetime 5s ./pkg/gateways/
// (minimizing a new input with 14 arguments takes long: 0 execs/sec meanwhile is not a hang).
func FuzzFromSecret(f *testing.F) {
	c := testgateways.ValidCredential(f)
	seed := func(epType, endpoint string, ca []byte, insecure, proxy, credType string, cert, key []byte, token, imp, managedFields, lastApplied, labels string) {
		f.Add(epType, endpoint, ca, "", insecure, proxy, credType, cert, key, token, imp, managedFields, lastApplied, labels)
	}
	seed("", "https://127.0.0.2:6443", c.CAPEM, "", "", "X509Certificate", c.CertPEM, c.KeyPEM, "", "", "", "", `{"env":"prod"}`)
	seed("Direct", " https://127.0.0.2:6443\n", nil, "true", "socks5://127.0.0.1:1080", "BearerToken", nil, nil, " tok\n", "Caller", `[{"manager":"kubectl"}]`, `{"kubectl.kubernetes.io/last-applied-configuration":"{\"spec\":{\"credential\":{\"bearerToken\":\"x\"}}}"}`, "{}")
	seed("Konnectivity", "https://10.0.0.1", c.CAPEM, "maybe", "http://user:pw@proxy:3128", "X509Certificate", c.CertPEM, nil, "tok", "None", "{[", "{not json", `{"a":1}`)
	seed("Tunnel", "http://x", []byte("not pem"), "1", "ftp://x", "", []byte("-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n"), c.KeyPEM, "", "Everyone", "", "", `["argocd.argoproj.io/secret-type"]`)
	seed("Direct", "https://127.0.0.2:6443", c.CAPEM, "", "http://u:proxy-secret@127.0.0.1:3128", "BearerToken", nil, nil, "tok with space", "Caller", `[{"manager":"m","fieldsV1":{"f:spec":{}}}]`, `{"x":"y"}`, `{"argocd.argoproj.io/secret-type":"cluster"}`)

	f.Fuzz(func(t *testing.T, epType, endpoint string, ca []byte, serverName, insecure, proxy, credType string, cert, key []byte, token, imp, managedFields, annotations, labels string) {
		// A canary in the middle of any token: whatever else the token is,
		// no read may echo it.
		if token != "" {
			token = token[:len(token)/2] + tokenCanary + token[len(token)/2:]
		}
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
		put(KeyLabels, []byte(labels))
		// The Secret's own metadata, as an administrator or a GitOps tool
		// may set it: never the gateway's.
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name: "fuzz", Namespace: testNamespace, ResourceVersion: "1",
				Labels:      map[string]string{LabelGateway: "true", secretOwnKey: "cluster"},
				Annotations: map[string]string{secretOwnKey: "secret-only"},
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
		for key, got := range map[string]map[string]string{KeyLabels: g.Object.Labels, KeyAnnotations: g.Object.Annotations} {
			raw := data[key]
			var want map[string]string
			if len(strings.TrimSpace(string(raw))) > 0 && json.Unmarshal(raw, &want) != nil {
				if g.Ready || !strings.Contains(g.Problem, "data["+key+"]") {
					t.Fatalf("data[%s] = %q is not a JSON object of strings, yet Ready=%v, problem %q", key, raw, g.Ready, g.Problem)
				}
				continue
			}
			if len(want) == 0 {
				want = nil
			}
			// Exactly the data key's: the Secret's own labels and annotations never show.
			if !maps.Equal(got, want) {
				t.Fatalf("the gateway's %s are %v, data[%s] says %v", key, got, key, want)
			}
		}
		pub, err := json.Marshal(g.Public())
		if err != nil {
			t.Fatal(err)
		}
		// Unless another input holds the same text, the public object cannot.
		others := strings.Join([]string{epType, endpoint, string(ca), serverName, insecure, proxy, credType, string(cert), imp, managedFields, annotations, labels}, "\x00")
		if token != "" && !strings.Contains(others, tokenCanary) && strings.Contains(string(pub), tokenCanary) {
			t.Fatalf("the public gateway echoes the token: %s", pub)
		}
		if b, _ := pem.Decode(key); b != nil && len(b.Bytes) >= 16 {
			if body := base64.StdEncoding.EncodeToString(b.Bytes)[:16]; !strings.Contains(others+token, body) && strings.Contains(string(pub), body) {
				t.Fatalf("the public gateway echoes the private key: %s", pub)
			}
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
		// Field ownership is kept across a write-back, as read (a value
		// that is not a list of entries reads as none).
		if !equality.Semantic.DeepEqual(again.ManagedFields, g.Object.ManagedFields) {
			t.Fatalf("managed fields changed on a write-back:\nfirst  %+v\nsecond %+v", g.Object.ManagedFields, again.ManagedFields)
		}
		if r1, r2 := redact(g.Object), redact(again); !equality.Semantic.DeepEqual(r2.Labels, r1.Labels) || !equality.Semantic.DeepEqual(r2.Annotations, r1.Annotations) {
			t.Fatalf("metadata changed on a write-back: labels %v -> %v, annotations %v -> %v", g.Object.Labels, again.Labels, g.Object.Annotations, again.Annotations)
		}
		if !maps.Equal(s2.Annotations, s.Annotations) || !maps.Equal(s2.Labels, s.Labels) {
			t.Fatalf("a write-back changed the Secret's own metadata: labels %v -> %v, annotations %v -> %v", s.Labels, s2.Labels, s.Annotations, s2.Annotations)
		}
		// A write-back may heal a malformed value that the spec cannot
		// express (e.g. insecure-skip-tls-verify: "maybe" reads as false),
		// but must never break a usable gateway.
		if g.Ready && !Parse(s2).Ready {
			t.Fatalf("a usable gateway became unusable on a write-back: %s", Parse(s2).Problem)
		}
	})
}

// FuzzKubeconfig feeds arbitrary bytes to the kubeconfig read of a credential
// Secret, which whoever may write Secrets in a source namespace wrote.
// Invariants: no panic; a usable kubeconfig gives a server and exactly one of
// a token or a certificate with its key; and no problem quotes what the
// kubeconfig holds under token, password, client-key-data or
// client-certificate-data, as text or as the list of bytes fmt prints.
// Fuzz it with: go test -run '^$' -fuzz FuzzKubeconfig -fuzztime 1m ./pkg/gateways/
func FuzzKubeconfig(f *testing.F) {
	c := testgateways.ValidCredential(f)
	f.Add(testgateways.KubeconfigBytes(f, "https://10.0.0.7:6443", c.CAPEM, "fuzz-token-value", nil, nil))
	f.Add(testgateways.KubeconfigBytes(f, "https://10.0.0.7:6443", c.CAPEM, "", c.CertPEM, c.KeyPEM))
	f.Add([]byte("users: [{name: u, user: {token: first-secret-token}}, {name: u, user: {token: second-secret-token, client-key-data: c2VjcmV0LWtleQ==}}]\n"))
	f.Add([]byte("clusters: [{name: c, cluster: {server: first-secret-server}}, {name: c, cluster: {server: x}}]\n"))
	f.Add([]byte("users: [{name: u, user: {token: !!int secret-token-value}}]\n"))
	f.Add([]byte("a: &a [1]\nb: *a\n"))
	f.Add(testgateways.KubeconfigWith("    as: limited-user\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		m := &Material{}
		problem := fromKubeconfig(m, raw)
		if problem == "" && (m.Server == "" || (m.Token == "") == (len(m.Cert) == 0) || (len(m.Cert) > 0 && len(m.Key) == 0)) {
			t.Fatalf("usable, yet server %q, token %v, cert %v, key %v", m.Server, m.Token != "", len(m.Cert) > 0, len(m.Key) > 0)
		}
		if problem == "" {
			return
		}
		for _, v := range secretValues(raw) {
			if len(v) >= 8 && (strings.Contains(problem, v) || strings.Contains(problem, strings.Trim(fmt.Sprint([]byte(v)), "[]"))) {
				t.Fatalf("the problem quotes a credential %q: %s", v, problem)
			}
		}
	})
}

var secretKeyValue = regexp.MustCompile(`(?:token|password|client-key-data|client-certificate-data)\s*:\s*([^,}\]\n]+)`)

// secretValues is what raw holds under the keys that carry a credential
// (as text, and base64-decoded), wherever they are.
func secretValues(raw []byte) []string {
	js, err := boundedyaml.ToJSON(raw, kubeconfigLimits)
	if err != nil {
		// A refused document is not read as a tree: take the text after
		// each such key.
		var out []string
		for _, m := range secretKeyValue.FindAllSubmatch(raw, -1) {
			out = append(out, strings.TrimSpace(string(m[1])))
		}
		return out
	}
	var v any
	_ = json.Unmarshal(js, &v)
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if s, ok := e.(string); ok && slices.Contains([]string{"token", "password", "client-key-data", "client-certificate-data"}, k) {
					out = append(out, s)
					if b, err := base64.StdEncoding.DecodeString(s); err == nil {
						out = append(out, string(b))
					}
				}
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(v)
	return out
}
