package localenv

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
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

// CA is a certificate authority kept in memory and written to the state dir.
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
	// CertFile is the PEM file of the CA certificate.
	CertFile string
}

// KeyPair is a PEM certificate and key, also written to CertFile/KeyFile.
type KeyPair struct {
	CertPEM  []byte
	KeyPEM   []byte
	CertFile string
	KeyFile  string
}

// certValidity is long enough for any demo session, short enough to be obviously local.
const certValidity = 7 * 24 * time.Hour

func newKey() (*ecdsa.PrivateKey, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) }

func serial() (*big.Int, error) { return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126)) }

// newCA creates a self-signed CA and writes <dir>/<name>.crt and .key.
func newCA(dir, name string) (*CA, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		// Distinct names: a verifier tries each CA whose name matches the
		// issuer, and a same-named wrong CA costs a failing signature check.
		Subject:               pkix.Name{CommonName: filepath.Base(dir) + "-" + name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("create CA %s: %w", name, err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &CA{Cert: cert, Key: key, CertPEM: pemBlock("CERTIFICATE", der), CertFile: filepath.Join(dir, name+".crt")}
	keyPEM, err := keyToPEM(key)
	if err != nil {
		return nil, err
	}
	if err := writeFiles(map[string][]byte{ca.CertFile: ca.CertPEM, filepath.Join(dir, name+".key"): keyPEM}); err != nil {
		return nil, err
	}
	return ca, nil
}

// certSpec says what a leaf certificate is for.
type certSpec struct {
	CommonName   string
	Organization []string // groups, for client certificates
	DNSNames     []string
	IPs          []string
	Server       bool
	Client       bool
}

// issue signs a leaf certificate and writes <dir>/<name>.crt and .key.
func (ca *CA) issue(dir, name string, spec certSpec) (*KeyPair, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: spec.CommonName, Organization: spec.Organization},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		DNSNames:     spec.DNSNames,
	}
	for _, s := range spec.IPs {
		ip := net.ParseIP(s)
		if ip == nil {
			return nil, fmt.Errorf("certificate %s: bad IP SAN %q", name, s)
		}
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
	}
	if spec.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if spec.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("issue %s: %w", name, err)
	}
	keyPEM, err := keyToPEM(key)
	if err != nil {
		return nil, err
	}
	kp := &KeyPair{
		CertPEM:  pemBlock("CERTIFICATE", der),
		KeyPEM:   keyPEM,
		CertFile: filepath.Join(dir, name+".crt"),
		KeyFile:  filepath.Join(dir, name+".key"),
	}
	return kp, writeFiles(map[string][]byte{kp.CertFile: kp.CertPEM, kp.KeyFile: kp.KeyPEM})
}

// newSigningKey writes a service-account signing key pair: <name>.key and <name>.pub.
func newSigningKey(dir, name string) (keyFile, pubFile string, err error) {
	key, err := newKey()
	if err != nil {
		return "", "", err
	}
	keyPEM, err := keyToPEM(key)
	if err != nil {
		return "", "", err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return "", "", err
	}
	keyFile, pubFile = filepath.Join(dir, name+".key"), filepath.Join(dir, name+".pub")
	return keyFile, pubFile, writeFiles(map[string][]byte{keyFile: keyPEM, pubFile: pemBlock("PUBLIC KEY", pubDER)})
}

func keyToPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pemBlock("EC PRIVATE KEY", der), nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func writeFiles(files map[string][]byte) error {
	for path, data := range files {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return err
		}
	}
	return nil
}
