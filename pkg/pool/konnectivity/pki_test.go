package konnectivity

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
)

// issue has ca sign a certificate for cn, for client and server use (a
// serving one for ips), and returns it and its key as PEM.
func issue(t testing.TB, ca *testpki.CA, cn string, ips ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	p := ca.MustIssue(t, testpki.Spec{CommonName: cn, IPs: ips, Client: true, Server: true})
	return p.CertPEM, p.KeyPEM
}

// writeFile replaces path atomically (as a kubelet-mounted Secret changes).
func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
