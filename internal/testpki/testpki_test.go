package testpki

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"slices"
	"testing"
	"time"
)

// What Spec asks for is what the certificate says, and it verifies against
// its CA for that use only.
func TestIssue(t *testing.T) {
	ca := MustCA(t, "testpki-ca")
	notAfter := time.Now().Add(time.Hour).Truncate(time.Second)
	p := ca.MustIssue(t, Spec{CommonName: "alice", Organization: []string{"developers"}, DNSNames: []string{"localhost"},
		IPs: []string{"127.0.0.2"}, Server: true, NotAfter: notAfter})
	c := p.Cert
	if c.Subject.CommonName != "alice" || !slices.Equal(c.Subject.Organization, []string{"developers"}) ||
		!slices.Equal(c.DNSNames, []string{"localhost"}) || len(c.IPAddresses) != 1 || !c.IPAddresses[0].Equal(net.ParseIP("127.0.0.2")) ||
		!c.NotAfter.Equal(notAfter) || c.IsCA {
		t.Fatalf("certificate does not say what the spec asked: %+v", c)
	}
	verify := func(usage x509.ExtKeyUsage) error {
		_, err := c.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: "localhost", KeyUsages: []x509.ExtKeyUsage{usage}})
		return err
	}
	if err := verify(x509.ExtKeyUsageServerAuth); err != nil {
		t.Errorf("server certificate does not verify for serverAuth: %v", err)
	}
	if verify(x509.ExtKeyUsageClientAuth) == nil {
		t.Error("server-only certificate verifies for clientAuth")
	}
	if _, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM); err != nil {
		t.Errorf("PEM pair: %v", err)
	}
	if block, _ := pem.Decode(ca.CertPEM); block == nil || !ca.Cert.IsCA {
		t.Error("the CA's PEM or IsCA is wrong")
	}
	if _, err := ca.Issue(Spec{CommonName: "bad", IPs: []string{"not-an-ip"}}); err == nil {
		t.Error("a bad IP SAN was accepted")
	}

	dir := t.TempDir()
	certFile, keyFile, err := ca.WriteFiles(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
		t.Errorf("the CA's files: %v", err)
	}
	keyPEM, pubPEM, err := NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := pem.Decode(pubPEM); b == nil || b.Type != "PUBLIC KEY" {
		t.Errorf("signing key's public PEM: %q", pubPEM)
	}
	if b, _ := pem.Decode(keyPEM); b == nil || b.Type != "EC PRIVATE KEY" {
		t.Errorf("signing key's PEM: %q", keyPEM)
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the CA's key file: %v %v, want mode 0600", fi.Mode(), err)
	}
}
