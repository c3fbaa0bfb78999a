package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"testing"
	"time"
)

// benchPKI is one managed cluster's PKI: a CA, a serving certificate for
// 127.0.0.1 and a client certificate. ECDSA P-256, like hack/localenv.
type benchPKI struct {
	caPEM      []byte
	caPool     *x509.CertPool
	serving    tls.Certificate
	clientCert []byte // PEM
	clientKey  []byte // PEM
	client     tls.Certificate
}

func newBenchPKI(tb testing.TB) *benchPKI {
	tb.Helper()
	caKey := benchKey(tb)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "bench-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	p := &benchPKI{caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), caPool: x509.NewCertPool()}
	p.caPool.AddCert(ca)

	issue := func(serial int64, tmpl *x509.Certificate) (certPEM, keyPEM []byte, pair tls.Certificate) {
		key := benchKey(tb)
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = caTmpl.NotBefore, caTmpl.NotAfter
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			tb.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			tb.Fatal(err)
		}
		certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		keyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
		if pair, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
			tb.Fatal(err)
		}
		return certPEM, keyPEM, pair
	}
	_, _, p.serving = issue(2, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	p.clientCert, p.clientKey, p.client = issue(3, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "gateway", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	return p
}

func benchKey(tb testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

// serverTLS requires and verifies a client certificate, as a kube-apiserver
// does when the caller presents one.
func (p *benchPKI) serverTLS() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{p.serving},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    p.caPool,
	}
}

// clientTLS trusts the CA and presents the client certificate.
func (p *benchPKI) clientTLS() *tls.Config {
	return &tls.Config{RootCAs: p.caPool, Certificates: []tls.Certificate{p.client}}
}
