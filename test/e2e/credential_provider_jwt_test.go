package e2e

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

const (
	jwtAudience = "cluster-gateway-e2e"
	jwtSubject  = "gateway-e2e"
	jwtReplica  = "127.0.0.243" // a loopback address of its own (addresses_test uses .241, .242)
)

// apiserverTokenCacheTTL is how long kube-apiserver keeps a token it
// accepted (its TokenSuccessCacheTTL, not a flag), expired or not: a token
// is refused for certain only this long after its expiry.
const apiserverTokenCacheTTL = 10 * time.Second

// The short-lived token run: by default 15-second tokens for 35 seconds,
// two refreshes (at 4/5 of a token's life, ~12s) and the first token's
// expiry, seen refused by the cluster; `make soak` runs one-minute tokens
// for SOAK_ROTATION.
var (
	providerTokens = flag.Duration("provider-tokens.duration", 35*time.Second,
		"how long TestCredentialProviderShortLivedTokens sends requests through a provider's short-lived tokens")
	providerTokenTTL = flag.Duration("provider-tokens.ttl", 15*time.Second,
		"the lifetime of the tokens TestCredentialProviderShortLivedTokens's provider mints")
)

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
// JWTs (structured authentication) that a provider mints for a short time
// (-provider-tokens.ttl). Through the hub for over two token lifetimes
// (-provider-tokens.duration), ordinary requests, a watch, logs -f and an
// exec session work: no request is refused (the token is renewed before it
// expires) while the cluster refuses the first token once it expired, no
// token rotation makes a pool entry, and the streams opened with the first
// token stay open. It restarts the gateway, so it does not run in parallel.
func TestCredentialProviderShortLivedTokens(t *testing.T) {
	requireGateway(t)
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
`, bin, keyFile, issuer.URL, jwtAudience, jwtSubject, *providerTokenTTL, runs)
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

	// The token the gateway holds as the run begins: the cluster takes it
	// now, and must refuse it once it expired (and left the cluster's
	// token cache), while the gateway's requests go on.
	first := lastProviderRun(t, runs)
	if code := replicaGetWithToken(t, replica, first.token); code != http.StatusOK {
		t.Fatalf("the provider's current token, sent straight to %s: %d, want 200", replica.Name, code)
	}
	refuseFrom := first.expires.Add(apiserverTokenCacheTTL + time.Second)
	refused := false

	span, ttl := *providerTokens, *providerTokenTTL
	deadline := time.Now().Add(span)
	for i := 0; time.Now().Before(deadline); i++ {
		if got, err := whoami(); err != nil || got != user {
			t.Fatalf("request %d, %v into the run: the managed cluster saw %q (%v), want %q", i, time.Until(deadline), got, err, user)
		}
		if err := ex.echo(fmt.Sprintf("line-%d", i)); err != nil {
			t.Fatalf("the exec session, %d requests into the run: %v\n%s", i, err, ex.stderr)
		}
		if !refused && time.Now().After(refuseFrom) {
			if code := replicaGetWithToken(t, replica, first.token); code != http.StatusUnauthorized {
				t.Fatalf("the first token, expired at %s, sent straight to %s at %s: %d, want 401", first.expires.Format(time.TimeOnly), replica.Name, time.Now().Format(time.TimeOnly), code)
			}
			refused = true
			t.Logf("the first token (expired at %s) is refused by the cluster; requests through the gateway go on", first.expires.Format(time.TimeOnly))
		}
		time.Sleep(2 * time.Second)
	}
	if got, want := countLines(runs)-firstRuns, max(2, int(span/ttl)); got < want {
		t.Fatalf("the provider ran %d times in %v of %v tokens, want >= %d: the run proves too little", got, span, ttl, want)
	}
	if !refused {
		t.Fatalf("the run (%v) ended before the first token expired and left the cluster's token cache (%s): it proves too little; run for longer than -provider-tokens.ttl + %s", span, refuseFrom.Format(time.TimeOnly), apiserverTokenCacheTTL)
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
	// A request first, so the current token is one renewed on time (with a
	// fifth of its life left at least), as the status must show.
	if got, err := whoami(); err != nil || got != user {
		t.Fatalf("after the run: the managed cluster saw %q (%v), want %q", got, err, user)
	}
	cur := getGateway(t, gw.Name)
	if c := cur.Status.Credential; c == nil || c.Source != "Provider jwt" || c.ExpirationTime == nil || !c.ExpirationTime.After(time.Now()) {
		t.Errorf("status.credential = %+v, want source \"Provider jwt\" and the current token's expiry", c)
	}
}

// providerRun is one line of the jwtprovider's JWT_RUNS file.
type providerRun struct {
	expires time.Time
	token   string
}

// lastProviderRun is the provider's last run: the token the gateway holds.
func lastProviderRun(t *testing.T, path string) providerRun {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	f := strings.Fields(lines[len(lines)-1])
	if len(f) != 3 {
		t.Fatalf("%s: last line %q, want: time, expiry, token", path, lines[len(lines)-1])
	}
	exp, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return providerRun{expires: time.Unix(exp, 0), token: f[2]}
}

// replicaGetWithToken lists namespaces on c with token alone (no client
// certificate), and returns the status code.
func replicaGetWithToken(t *testing.T, c *localenv.Cluster, token string) int {
	t.Helper()
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: poolOf(c.CA.CertPEM)}}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, c.URL+"/api/v1/namespaces?limit=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", c.URL, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func countLines(path string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), "\n")
}
