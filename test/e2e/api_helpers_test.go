package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
	"github.com/clustergateway/cluster-gateway/internal/testpoll"
	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/generated/clientset/versioned"
)

// Helpers for the API tests (api, informer, rbac, validation): clients on the
// hub, unique names, throw-away credentials, and polling with deadlines.

// secretNamespace is where the gateway stores ClusterGateways (localenv's --secret-namespace).
const secretNamespace = "cluster-gateway-system"

// gatewayLabel marks a Secret in secretNamespace as a ClusterGateway.
const gatewayLabel = "gateway.clustergateway.io/cluster-gateway"

// pollTimeout bounds every wait for something to become true; nothing
// asserts on how quickly it does.
const pollTimeout = 30 * time.Second

// uniqueName returns a DNS-1123 name unique to this run, so parallel tests
// and leftovers of earlier runs never collide.
func uniqueName(t *testing.T, prefix string) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return prefix + "-" + hex.EncodeToString(b)
}

// hubConfigFrom loads a rest config from one of the environment's kubeconfigs.
func hubConfigFrom(t *testing.T, kubeconfig string) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("load %s: %v", kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	return cfg
}

// gatewayClient is the generated clientset against the hub with kubeconfig.
func gatewayClient(t *testing.T, kubeconfig string) versioned.Interface {
	t.Helper()
	c, err := versioned.NewForConfig(hubConfigFrom(t, kubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// hubAdmin is a core client for the hub as its admin, to look at the Secrets
// behind the gateways.
func hubAdmin(t *testing.T) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(hubConfigFrom(t, env.Hub.Kubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// cleanupGateway deletes the gateway's Secret at the end of the test,
// whatever state the test left it in.
func cleanupGateway(t *testing.T, name string) {
	t.Helper()
	admin := hubAdmin(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := admin.CoreV1().Secrets(secretNamespace).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("cleanup: delete Secret %s/%s: %v", secretNamespace, name, err)
		}
	})
}

// getSecret returns the Secret behind a gateway, read from the hub as its admin.
func getSecret(t *testing.T, name string) (*corev1.Secret, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return hubAdmin(t).CoreV1().Secrets(secretNamespace).Get(ctx, name, metav1.GetOptions{})
}

// mustSecret is getSecret that fails the test on error.
func mustSecret(t *testing.T, name string) *corev1.Secret {
	t.Helper()
	s, err := getSecret(t, name)
	if err != nil {
		t.Fatalf("get Secret %s/%s as hub admin: %v", secretNamespace, name, err)
	}
	return s
}

// requireNoSecret fails unless the gateway has no Secret.
func requireNoSecret(t *testing.T, name string) {
	t.Helper()
	if s, err := getSecret(t, name); err == nil {
		t.Errorf("Secret %s/%s exists (data keys %v), want none", secretNamespace, name, keys(s.Data))
	} else if !apierrors.IsNotFound(err) {
		t.Errorf("get Secret %s/%s: %v", secretNamespace, name, err)
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// eventually polls cond until it returns nil, failing the test with cond's
// last error if it does not within pollTimeout (internal/testpoll).
func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	testpoll.Eventually(t, pollTimeout, what, cond)
}

// testCreds is a throw-away CA and a client certificate and key it signed.
type testCreds struct {
	CAPEM, CertPEM, KeyPEM []byte
	Subject                string
	NotAfter               time.Time
}

// newTestCreds issues a CA and a client certificate for commonName (group e2e-tests).
func newTestCreds(t *testing.T, commonName string) testCreds {
	t.Helper()
	ca := testpki.MustCA(t, commonName+"-ca")
	c := ca.MustIssue(t, testpki.Spec{CommonName: commonName, Organization: []string{"e2e-tests"}, Client: true})
	return testCreds{CAPEM: ca.CertPEM, CertPEM: c.CertPEM, KeyPEM: c.KeyPEM, Subject: c.Cert.Subject.String(), NotAfter: c.Cert.NotAfter}
}

// randomToken returns a bearer token that appears nowhere else.
func randomToken(t *testing.T) string {
	t.Helper()
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "e2e-token-" + hex.EncodeToString(b)
}

// secretNeedles are the forms in which material could leak into an API
// response: the PEM text, its base64 (as []byte fields are encoded) and a
// piece of the body, which is distinct from every other PEM.
func secretNeedles(material ...[]byte) []string {
	var out []string
	for _, m := range material {
		s := string(m)
		out = append(out, s, base64.StdEncoding.EncodeToString(m))
		if block, _ := pem.Decode(m); block != nil {
			body := base64.StdEncoding.EncodeToString(block.Bytes)
			out = append(out, body[len(body)/2:len(body)/2+32])
		} else {
			out = append(out, base64.StdEncoding.EncodeToString(m)[:len(s)/2])
		}
	}
	return out
}

// requireNoMaterial fails if out contains any of the material in any form.
func requireNoMaterial(t *testing.T, what, out string, material ...[]byte) {
	t.Helper()
	for _, n := range secretNeedles(material...) {
		if strings.Contains(out, n) {
			t.Errorf("%s reveals credential material (%q…):\n%s", what, n[:min(len(n), 24)], out)
			return
		}
	}
	// Field names (as in managedFields) are fine; a PEM key never is.
	if strings.Contains(out, "PRIVATE KEY") {
		t.Errorf("%s contains a PEM private key:\n%s", what, out)
	}
}

// x509GatewayYAML is a ClusterGateway manifest with X509 credentials.
func x509GatewayYAML(name, address string, labels map[string]string, c testCreds) string {
	return fmt.Sprintf(`apiVersion: gateway.clustergateway.io/v1alpha1
kind: ClusterGateway
metadata:
  name: %s
%s
spec:
  endpoint:
    address: %s
    caBundle: %s
  credential:
    type: X509Certificate
    x509:
      certificate: %s
      privateKey: %s
`, name, labelsYAML(labels), address, base64.StdEncoding.EncodeToString(c.CAPEM),
		base64.StdEncoding.EncodeToString(c.CertPEM), base64.StdEncoding.EncodeToString(c.KeyPEM))
}

// tokenGatewayYAML is a ClusterGateway manifest with a bearer token ("" leaves it out).
func tokenGatewayYAML(name, address string, labels map[string]string, token string) string {
	tok := ""
	if token != "" {
		tok = "\n    bearerToken: " + token
	}
	return fmt.Sprintf(`apiVersion: gateway.clustergateway.io/v1alpha1
kind: ClusterGateway
metadata:
  name: %s
%s
spec:
  endpoint:
    address: %s
    insecureSkipTLSVerify: true
  credential:
    type: BearerToken%s
`, name, labelsYAML(labels), address, tok)
}

func labelsYAML(labels map[string]string) string {
	if len(labels) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("  labels:")
	for k, v := range labels {
		fmt.Fprintf(&b, "\n    %s: %q", k, v)
	}
	return b.String()
}

// tokenGateway is a typed BearerToken gateway.
func tokenGateway(name, address, token string) *gatewayv1alpha1.ClusterGateway {
	return &gatewayv1alpha1.ClusterGateway{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: gatewayv1alpha1.ClusterGatewaySpec{
			Endpoint: gatewayv1alpha1.Endpoint{Address: address, InsecureSkipTLSVerify: true},
			Credential: gatewayv1alpha1.Credential{
				Type:        gatewayv1alpha1.CredentialBearerToken,
				BearerToken: token,
			},
		},
	}
}

// x509Gateway is a typed X509Certificate gateway verified with c's CA.
func x509Gateway(name, address string, c testCreds) *gatewayv1alpha1.ClusterGateway {
	return &gatewayv1alpha1.ClusterGateway{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: gatewayv1alpha1.ClusterGatewaySpec{
			Endpoint: gatewayv1alpha1.Endpoint{Address: address, CABundle: c.CAPEM},
			Credential: gatewayv1alpha1.Credential{
				Type: gatewayv1alpha1.CredentialX509Certificate,
				X509: &gatewayv1alpha1.X509Credential{Certificate: c.CertPEM, PrivateKey: c.KeyPEM},
			},
		},
	}
}

// readyCondition returns the Ready condition of a gateway, or nil.
func readyCondition(gw *gatewayv1alpha1.ClusterGateway) *metav1.Condition {
	for i := range gw.Status.Conditions {
		if gw.Status.Conditions[i].Type == gatewayv1alpha1.ConditionReady {
			return &gw.Status.Conditions[i]
		}
	}
	return nil
}

// tableRow finds the row of name in `kubectl get` table output and returns its cells.
func tableRow(out, name string) []string {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == name {
			return f
		}
	}
	return nil
}

// kubectlFails runs kubectl, which must fail; it returns stderr.
func kubectlFails(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	r := kubectl(t, kubeconfig, nil, "", args...)
	if r.Err == nil {
		t.Fatalf("kubectl %s succeeded, want an error; stdout:\n%s", strings.Join(args, " "), r.Stdout)
	}
	if r.ExitCode == -1 {
		t.Fatalf("kubectl %s did not run: %v", strings.Join(args, " "), r.Err)
	}
	return r.Stderr
}

// kubectlStdin runs kubectl with stdin and fails the test unless it exits 0.
func kubectlStdin(t *testing.T, kubeconfig, stdin string, args ...string) string {
	t.Helper()
	r := kubectl(t, kubeconfig, nil, stdin, args...)
	if r.Err != nil {
		t.Fatalf("kubectl %s: %v\nstderr: %s", strings.Join(args, " "), r.Err, r.Stderr)
	}
	return r.Stdout
}
