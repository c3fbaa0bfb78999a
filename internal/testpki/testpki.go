// Package testpki makes the certificates that tests and the local
// environment need: a CA, and leaf certificates it issues for a common name,
// groups (organizations), usages, DNS names and IPs, with a chosen validity.
// Only the standard library: importing it adds nothing to a module graph.
package testpki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// DefaultValidity is how long certificates are valid unless a Spec says otherwise.
const DefaultValidity = 7 * 24 * time.Hour

// CA is a certificate authority held in memory.
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA creates a self-signed CA. Give every CA a distinct name: a verifier
// tries each CA whose name matches a certificate's issuer, and a same-named
// wrong CA costs a failing signature check.
func NewCA(commonName string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(DefaultValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("create CA %s: %w", commonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyPEM, err := KeyPEM(key)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: PEM("CERTIFICATE", der), KeyPEM: keyPEM}, nil
}

// Spec says what a leaf certificate is for.
type Spec struct {
	CommonName   string
	Organization []string // groups, for client certificates
	DNSNames     []string
	IPs          []string
	Server       bool // extended key usage serverAuth
	Client       bool // extended key usage clientAuth
	// NotBefore and NotAfter default to an hour ago and DefaultValidity from now.
	NotBefore, NotAfter time.Time
	// IsCA makes an intermediate CA.
	IsCA bool
}

// Pair is a certificate and its key.
type Pair struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
	KeyPEM  []byte
}

// TLS is the pair as a tls.Certificate.
func (p *Pair) TLS() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{p.Cert.Raw}, PrivateKey: p.Key, Leaf: p.Cert}
}

// Issue signs a leaf certificate.
func (ca *CA) Issue(s Spec) (*Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: s.CommonName, Organization: s.Organization},
		NotBefore:    s.NotBefore,
		NotAfter:     s.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		DNSNames:     s.DNSNames,
	}
	if tmpl.NotBefore.IsZero() {
		tmpl.NotBefore = now.Add(-time.Hour)
	}
	if tmpl.NotAfter.IsZero() {
		tmpl.NotAfter = now.Add(DefaultValidity)
	}
	for _, a := range s.IPs {
		ip := net.ParseIP(a)
		if ip == nil {
			return nil, fmt.Errorf("certificate %s: bad IP SAN %q", s.CommonName, a)
		}
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
	}
	if s.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if s.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	if s.IsCA {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("issue %s: %w", s.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyPEM, err := KeyPEM(key)
	if err != nil {
		return nil, err
	}
	return &Pair{Cert: cert, Key: key, CertPEM: PEM("CERTIFICATE", der), KeyPEM: keyPEM}, nil
}

// WriteFiles writes the CA's certificate and key to dir/name.crt and
// dir/name.key and returns the paths.
func (ca *CA) WriteFiles(dir, name string) (certFile, keyFile string, err error) {
	return (&Pair{CertPEM: ca.CertPEM, KeyPEM: ca.KeyPEM}).WriteFiles(dir, name)
}

// NewSigningKey is a key pair that signs something other than certificates
// (a kube-apiserver's service-account tokens): the private key and the
// public key (PKIX), both PEM.
func NewSigningKey() (keyPEM, publicPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	if keyPEM, err = KeyPEM(key); err != nil {
		return nil, nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, nil, err
	}
	return keyPEM, PEM("PUBLIC KEY", pub), nil
}

// Pool is a CertPool of the CA alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// KeyPEM encodes an ECDSA key as PEM.
func KeyPEM(key crypto.Signer) ([]byte, error) {
	k, ok := key.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("unsupported key type %T", key)
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, err
	}
	return PEM("EC PRIVATE KEY", der), nil
}

// PEM encodes one block.
func PEM(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// WriteFiles writes the pair to dir/name.crt and dir/name.key and returns the paths.
func (p *Pair) WriteFiles(dir, name string) (certFile, keyFile string, err error) {
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, p.CertPEM, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, os.WriteFile(keyFile, p.KeyPEM, 0o600)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n
}

// T is what the Must helpers need of a test.
type T interface {
	Helper()
	Fatalf(format string, args ...any)
}

// MustCA is NewCA for tests.
func MustCA(t T, commonName string) *CA {
	t.Helper()
	ca, err := NewCA(commonName)
	if err != nil {
		t.Fatalf("testpki: %v", err)
	}
	return ca
}

// MustIssue is Issue for tests.
func (ca *CA) MustIssue(t T, s Spec) *Pair {
	t.Helper()
	p, err := ca.Issue(s)
	if err != nil {
		t.Fatalf("testpki: %v", err)
	}
	return p
}
