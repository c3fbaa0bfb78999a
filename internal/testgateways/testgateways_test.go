package testgateways

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

// The fixtures are test code: no file of the product (cmd/, pkg/) other than
// a test imports this package.
func TestNotImportedByProductCode(t *testing.T) {
	const self = "github.com/clustergateway/cluster-gateway/internal/testgateways"
	files := 0
	for _, root := range []string{"../../cmd", "../../pkg"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			files++
			for _, imp := range f.Imports {
				if p, _ := strconv.Unquote(imp.Path.Value); p == self {
					t.Errorf("%s imports %s, which is for tests only", path, self)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if files < 50 {
		t.Fatalf("read %d product files under cmd/ and pkg/; the walk did not find the product", files)
	}
}

// The credential's certificate is a client certificate its CA verifies, and
// the kubeconfig and Secret fixtures hold what they say.
func TestFixtures(t *testing.T) {
	c := ValidCredential(t)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.CAPEM) {
		t.Fatal("the credential's CA is not PEM")
	}
	block, _ := pem.Decode(c.CertPEM)
	if block == nil {
		t.Fatal("the credential's certificate is not PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil ||
		cert.Subject.CommonName != "gateway" {
		t.Errorf("the credential's certificate (CN %q) does not verify as a client certificate of its CA: %v", cert.Subject.CommonName, err)
	}
	if gw := X509Gateway(c); string(gw.Spec.Endpoint.CABundle) != string(c.CAPEM) || string(gw.Spec.Credential.X509.Certificate) != string(c.CertPEM) {
		t.Errorf("X509Gateway does not carry the credential: %+v", gw.Spec)
	}

	cfg, err := clientcmd.Load(KubeconfigBytes(t, "https://10.0.0.7:6443", c.CAPEM, "tok", nil, nil))
	if err != nil || cfg.Clusters["c"].Server != "https://10.0.0.7:6443" || cfg.AuthInfos["u"].Token != "tok" {
		t.Errorf("KubeconfigBytes: %+v, %v", cfg, err)
	}
	if cfg, err := clientcmd.Load(KubeconfigWith("    as: someone\n")); err != nil || cfg.AuthInfos["u"].Impersonate != "someone" {
		t.Errorf("KubeconfigWith: %+v, %v; want the extra line in the user", cfg, err)
	}
	if s := CAPISecret("prod-kubeconfig", "3", []byte("x")); s.Namespace != SourceNamespace || s.ResourceVersion != "3" ||
		s.Labels["cluster.x-k8s.io/cluster-name"] != "prod" || string(s.Data["value"]) != "x" {
		t.Errorf("CAPISecret: %+v", s)
	}
}

// Run returns once synced holds, and its cleanup stops run and waits for it.
func TestRunStopsAtCleanup(t *testing.T) {
	var running, synced atomic.Bool
	t.Run("run", func(t *testing.T) {
		Run(t, func(ctx context.Context) {
			running.Store(true)
			synced.Store(true)
			<-ctx.Done()
			running.Store(false)
		}, "synced", synced.Load)
		if !running.Load() {
			t.Error("Run returned with run not running")
		}
	})
	if running.Load() {
		t.Error("run still runs after the test's cleanup")
	}
}
