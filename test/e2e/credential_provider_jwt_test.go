package e2e

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

const (
	jwtAudience = "cluster-gateway-e2e"
	jwtSubject  = "gateway-e2e"
	jwtTTL      = time.Minute
	jwtReplica  = "127.0.0.243" // a loopback address of its own (addresses_test uses .241, .242)
)

// providerTokens is how long the short-lived token run lasts: by default
// three refreshes (at 4/5 of a token's life, ~48s) and the expiry of the
// first tokens; `make soak` runs it for SOAK_ROTATION.
var providerTokens = flag.Duration("provider-tokens.duration", 190*time.Second,
	"how long TestCredentialProviderShortLivedTokens sends requests through a provider's one-minute tokens")

// jwtIssuer serves OIDC discovery and the JWKS of key on loopback HTTPS.
func jwtIssuer(t *testing.T, key *rsa.PrivateKey) *httptest.Server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(nil)
	srv.Listener.Close()
	srv.Listener = l
	b64 := base64.RawURLEncoding.EncodeToString
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/.well-known/openid-configuration":
			_ = json.NewEncoder(w).Encode(map[string]interface{}{"issuer": srv.URL, "jwks_uri": srv.URL + "/jwks",
				"id_token_signing_alg_values_supported": []string{"RS256"}})
		case "/jwks":
			_ = json.NewEncoder(w).Encode(map[string]interface{}{"keys": []map[string]string{{
				"kty": "RSA", "alg": "RS256", "use": "sig", "kid": "e2e",
				"n": b64(key.N.Bytes()), "e": b64(big.NewInt(int64(key.E)).Bytes()),
			}}})
		default:
			http.NotFound(w, r)
		}
	})
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// TestCredentialProviderShortLivedTokens: a managed kube-apiserver accepts
// JWTs (structured authentication) that a provider mints for one minute.
// Through the hub for over three token lifetimes (-provider-tokens.duration), ordinary requests, a watch,
// logs -f and an exec session work: no request is refused (the token is
// renewed before it expires), no token rotation makes a pool entry, and the
// streams opened with the first token stay open. It restarts the gateway,
// so it does not run in parallel.
func TestCredentialProviderShortLivedTokens(t *testing.T) {
	requireGateway(t)
	if testing.Short() {
		t.Skip("runs for over two minutes")
	}
	ctx := context.Background()
	dir := t.TempDir()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "jwt.key")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		t.Fatal(err)
	}
	issuer := jwtIssuer(t, key)
	issuerCA := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: issuer.Certificate().Raw})
	authn := fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: AuthenticationConfiguration
jwt:
- issuer:
    url: %s
    audiences: [%s]
    certificateAuthority: |
%s
  claimMappings:
    username: {claim: sub, prefix: "jwt:"}
`, issuer.URL, jwtAudience, indent(string(issuerCA), "      "))
	authnFile := filepath.Join(dir, "authentication.yaml")
	if err := os.WriteFile(authnFile, []byte(authn), 0o600); err != nil {
		t.Fatal(err)
	}
	m := env.Managed[0]
	replica, err := env.StartAPIServerReplica(ctx, m, jwtReplica, "--authentication-config="+authnFile)
	if err != nil {
		t.Fatalf("a kube-apiserver of %s accepting the provider's JWTs: %v", m.Name, err)
	}
	t.Cleanup(func() { _ = env.StopCluster(replica) })
	direct := managedClient(t, 0)
	user := "jwt:" + jwtSubject
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName(t, "jwt")},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
	}
	if _, err := direct.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = direct.RbacV1().ClusterRoleBindings().Delete(ctx, crb.Name, metav1.DeleteOptions{}) })

	bin := filepath.Join(dir, "jwtprovider")
	if err := goBuild(".", bin, "./testdata/jwtprovider"); err != nil {
		t.Fatal(err)
	}
	runs := filepath.Join(dir, "runs")
	providers := fmt.Sprintf(`apiVersion: gateway.clustergateway.io/v1alpha1
kind: CredentialProviderConfig
providers:
- name: jwt
  exec:
    apiVersion: client.authentication.k8s.io/v1
    command: %s
    env:
    - {name: JWT_KEY_FILE, value: %s}
    - {name: JWT_ISSUER, value: %q}
    - {name: JWT_AUDIENCE, value: %s}
    - {name: JWT_SUBJECT, value: %s}
    - {name: JWT_TTL, value: %s}
    - {name: JWT_RUNS, value: %s}
`, bin, keyFile, issuer.URL, jwtAudience, jwtSubject, jwtTTL, runs)
	providersFile := filepath.Join(dir, "providers.yaml")
	if err := os.WriteFile(providersFile, []byte(providers), 0o600); err != nil {
		t.Fatal(err)
	}
	restartGateway(t, append(append([]string{}, env.GatewayArgs...), "--credential-providers-file="+providersFile))
	t.Cleanup(func() { restartGateway(t, nil) })

	gw := directGateway(uniqueName(t, "jwt"), 0)
	gw.Spec.Endpoint.Address = replica.URL
	gw.Spec.Credential = gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialProvider, Provider: &gatewayv1alpha1.ProviderReference{Name: "jwt"}}
	createGateway(t, gw)
	_, via := viaHub(t, gw.Name)
	whoami := func() (string, error) { return seenUser(ctx, via) }
	// The first token may precede the replica's RBAC cache; after that, no error.
	eventually(t, "the managed cluster to see the provider's JWT user", func() error {
		if got, err := whoami(); err != nil || got != user {
			return fmt.Errorf("the managed cluster saw %q (%v), want %q", got, err, user)
		}
		if _, err := via.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
			return err
		}
		return nil
	})
	base := gatewayMetrics(t)
	firstRuns := countLines(runs)

	w, err := via.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watch through the hub: %v", err)
	}
	defer w.Stop()
	kubeconfig := viaHubKubeconfig(t, gw.Name)
	logs := startKubectl(t, kubeconfig, nil, "logs", "-f", "demo")
	defer logs.stop()
	logs.waitLine(t, logLine)
	ex := startExecStream(t, kubeconfig, streamProtocols[0])
	defer ex.kill()

	span := *providerTokens
	deadline := time.Now().Add(span)
	for i := 0; time.Now().Before(deadline); i++ {
		if got, err := whoami(); err != nil || got != user {
			t.Fatalf("request %d, %v into the run: the managed cluster saw %q (%v), want %q", i, time.Until(deadline), got, err, user)
		}
		if err := ex.echo(fmt.Sprintf("line-%d", i)); err != nil {
			t.Fatalf("the exec session, %d requests into the run: %v\n%s", i, err, ex.stderr)
		}
		time.Sleep(2 * time.Second)
	}
	if got, want := countLines(runs)-firstRuns, max(2, int(span/jwtTTL)); got < want {
		t.Fatalf("the provider ran %d times in %v of %v tokens, want >= %d: the run proves too little", got, span, jwtTTL, want)
	}
	// The streams opened with the first token still carry data.
	expectAdded(t, w, direct, "default", uniqueName(t, "after-rotations"))
	for drained := false; !drained; {
		select {
		case <-logs.lines:
		default:
			drained = true
		}
	}
	logs.waitLine(t, logLine)
	if err := ex.finish(); err != nil {
		t.Errorf("the exec session ended with %v; stderr:\n%s", err, ex.stderr)
	}
	after := gatewayMetrics(t)
	const created = "cluster_gateway_pool_entry_creations_total"
	if got := after.Sum(created) - base.Sum(created); got != 0 {
		t.Errorf("token rotations created %v pool entries, want 0", got)
	}
	if got := after[`cluster_gateway_credential_rotations_total{source_kind="Provider"}`] - base[`cluster_gateway_credential_rotations_total{source_kind="Provider"}`]; got < 2 {
		t.Errorf("cluster_gateway_credential_rotations_total{source_kind=\"Provider\"} grew by %v over the run, want >= 2", got)
	}
	cur := getGateway(t, gw.Name)
	if c := cur.Status.Credential; c == nil || c.Source != "Provider jwt" || c.ExpirationTime == nil || !c.ExpirationTime.After(time.Now()) {
		t.Errorf("status.credential = %+v, want source \"Provider jwt\" and the current token's expiry", c)
	}
}

func countLines(path string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), "\n")
}
