package proxy

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
	"github.com/clustergateway/cluster-gateway/internal/testpoll"
	"github.com/clustergateway/cluster-gateway/pkg/credentials"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
	"github.com/clustergateway/cluster-gateway/pkg/pool"
)

// testProvider is pkg/credentials' test provider, built once for the
// package's tests (several build fixtures with it) into a directory that
// TestMain removes.
var testProvider struct {
	once     sync.Once
	dir, bin string
	err      error
}

// buildTestProvider builds pkg/credentials' test provider, once.
func buildTestProvider(t testing.TB) string {
	t.Helper()
	p := &testProvider
	p.once.Do(func() {
		if p.dir, p.err = os.MkdirTemp("", "proxy-test-provider-"); p.err != nil {
			return
		}
		p.bin = filepath.Join(p.dir, "provider")
		if out, err := exec.Command("go", "build", "-o", p.bin, "../credentials/testdata/provider").CombinedOutput(); err != nil {
			p.err = fmt.Errorf("%v\n%s", err, out)
		}
	})
	if p.err != nil {
		t.Fatalf("build the test provider: %v", p.err)
	}
	return p.bin
}

// removeTestProvider removes what buildTestProvider built, if anything.
func removeTestProvider() {
	if testProvider.dir != "" {
		_ = os.RemoveAll(testProvider.dir)
	}
}

// startProviders runs the providers of a providers file until the test ends.
func startProviders(t testing.TB, providersFile string) *credentials.Providers {
	t.Helper()
	cfg, err := credentials.LoadConfig(providersFile, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	providers, err := credentials.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = providers.Close() })
	return providers
}

// refusingCluster answers with the client certificate's CN and the token
// it got, and 401 to a certificate or token the test refuses.
type refusingCluster struct {
	mu      sync.Mutex
	refused map[string]bool // CNs and tokens
}

func (c *refusingCluster) refuse(what string) {
	c.mu.Lock()
	c.refused[what] = true
	c.mu.Unlock()
}

func (c *refusingCluster) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cn := ""
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		cn = r.TLS.PeerCertificates[0].Subject.CommonName
	}
	token := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	c.mu.Lock()
	no := c.refused[cn] || c.refused[token]
	c.mu.Unlock()
	if no {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	fmt.Fprintf(w, "%s %s", cn, token)
}

// A Provider gateway's client certificate is part of its pool entry: when
// the cluster refuses the certificate (401) the provider runs again, and
// its new certificate goes through a new entry (the old one retired as
// rotated); a new token with the same certificate keeps the entry. A
// gateway whose provider returns a certificate and no token is asked
// again on a 401 too.
func TestProviderCertificateRotationIsANewPoolEntry(t *testing.T) {
	bin := buildTestProvider(t)
	dir := t.TempDir()
	ca := testpki.MustCA(t, "provider-client-ca")
	write := func(name string, data []byte) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path+".tmp", data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil { // the provider never reads half a file
			t.Fatal(err)
		}
		return path
	}
	issue := func(prefix, cn string) (certFile, keyFile string) {
		pair := ca.MustIssue(t, testpki.Spec{CommonName: cn, Client: true})
		return write(prefix+".crt", pair.CertPEM), write(prefix+".key", pair.KeyPEM)
	}
	bothCert, bothKey := issue("both", "both-1")
	tokenFile := write("token", []byte("token-1"))
	onlyCert, onlyKey := issue("only", "only-1")
	providersFile := write("providers.yaml", []byte(fmt.Sprintf(`apiVersion: gateway.clustergateway.io/v1alpha1
kind: CredentialProviderConfig
providers:
- name: both
  exec:
    apiVersion: client.authentication.k8s.io/v1
    command: %s
    env:
    - {name: PROVIDER_CERT_FILE, value: %s}
    - {name: PROVIDER_KEY_FILE, value: %s}
    - {name: PROVIDER_TOKEN_FILE, value: %s}
- name: only
  exec:
    apiVersion: client.authentication.k8s.io/v1
    command: %s
    env:
    - {name: PROVIDER_CERT_FILE, value: %s}
    - {name: PROVIDER_KEY_FILE, value: %s}
`, bin, bothCert, bothKey, tokenFile, bin, onlyCert, onlyKey)))
	providers := startProviders(t, providersFile)

	cluster := &refusingCluster{refused: map[string]bool{}}
	up := httptest.NewUnstartedServer(cluster)
	serving := testpki.MustCA(t, "upstream-ca")
	pair := serving.MustIssue(t, testpki.Spec{CommonName: "upstream", IPs: []string{"127.0.0.1"}, Server: true}).TLS()
	up.TLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequestClientCert}
	up.EnableHTTP2 = true
	up.StartTLS()
	t.Cleanup(up.Close)

	secret := func(name string) *corev1.Secret {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: fixtureNamespace, ResourceVersion: "1", UID: types.UID("uid-" + name),
				Labels: map[string]string{gateways.LabelGateway: "true"}},
			Data: map[string][]byte{
				gateways.KeyEndpoint:       []byte(up.URL),
				gateways.KeyCABundle:       testpki.PEM("CERTIFICATE", serving.Cert.Raw),
				gateways.KeyCredentialType: []byte("Provider"),
				gateways.KeyProvider:       []byte(name),
			},
		}
	}
	store := gateways.NewStore(fake.NewClientset(secret("both"), secret("only")), fixtureNamespace)
	runGatewayStore(t, store)
	pl := newTestPool(t, 4, 2*time.Second, nil)
	px, err := newWiredProviders(t, store, providers, Config{Pool: pl, Authorizer: authorizerfactory.NewAlwaysAllowAuthorizer()})
	if err != nil {
		t.Fatal(err)
	}

	get := func(name string) (int, string) {
		rec := serveAs(px, name, "/api", &user.DefaultInfo{Name: "alice"}, httptest.NewRequest(http.MethodGet, "/api", nil))
		return rec.Code, rec.Body.String()
	}
	// until a request gets want through, within 20s
	until := func(name, want string) {
		t.Helper()
		var code int
		var body string
		testpoll.EventuallyTrue(t, 20*time.Second, name+" answers "+want, func() bool {
			code, body = get(name)
			return code == http.StatusOK && body == want
		})
	}
	created := func() int64 { return pl.Stats().Created }
	rotated := func() int64 { return pl.Stats().Retired[pool.ReasonRotated] }

	until("both", "both-1 token-1")
	until("only", "only-1 ")
	if c, r := created(), rotated(); c != 2 || r != 0 {
		t.Fatalf("after the first requests: %d entries created, %d rotated; want 2 and 0", c, r)
	}

	// A new token, the same certificate: the same entry.
	write("token", []byte("token-2"))
	cluster.refuse("token-1")
	until("both", "both-1 token-2")
	if c, r := created(), rotated(); c != 2 || r != 0 {
		t.Errorf("after a token rotation: %d entries created, %d rotated; want still 2 and 0", c, r)
	}

	// A new certificate (the token as it was): a new entry.
	issue("both", "both-2")
	cluster.refuse("both-1")
	until("both", "both-2 token-2")
	if c, r := created(), rotated(); c != 3 || r != 1 {
		t.Errorf("after a certificate rotation: %d entries created, %d rotated; want 3 and 1", c, r)
	}

	// A certificate without a token, refused: the provider runs again.
	issue("only", "only-2")
	cluster.refuse("only-1")
	until("only", "only-2 ")
	if c, r := created(), rotated(); c != 4 || r != 2 {
		t.Errorf("after the certificate-only rotation: %d entries created, %d rotated; want 4 and 2", c, r)
	}
}
