package gateways

import (
	"testing"
	"time"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
)

// testCredential is a PEM CA and a client certificate and key it signed.
type testCredential struct {
	caPEM, certPEM, keyPEM []byte
}

// newCredential issues a certificate for the user "gateway" in
// system:masters from a new CA; spec adds usages and validity.
func newCredential(t testing.TB, spec testpki.Spec) testCredential {
	t.Helper()
	ca := testpki.MustCA(t, "test-ca")
	spec.CommonName, spec.Organization = "gateway", []string{"system:masters"}
	c := ca.MustIssue(t, spec)
	return testCredential{caPEM: ca.CertPEM, certPEM: c.CertPEM, keyPEM: c.KeyPEM}
}

// newTestCredential is a client certificate valid from notBefore to notAfter.
func newTestCredential(t testing.TB, notBefore, notAfter time.Time) testCredential {
	t.Helper()
	return newCredential(t, testpki.Spec{Client: true, NotBefore: notBefore, NotAfter: notAfter})
}

func validCredential(t testing.TB) testCredential {
	t.Helper()
	return newCredential(t, testpki.Spec{Client: true, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)})
}
