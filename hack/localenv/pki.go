package localenv

import (
	"os"
	"path/filepath"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
)

// CA is a certificate authority (internal/testpki's) whose certificate and
// key are also written to the state dir. Its Issue and MustIssue sign
// certificates in memory, for tests that need more of them.
type CA struct {
	*testpki.CA
	// CertFile is the PEM file of the CA certificate.
	CertFile string
}

// KeyPair is a certificate and key, also written to CertFile/KeyFile.
type KeyPair struct {
	*testpki.Pair
	CertFile string
	KeyFile  string
}

// certSpec says what a leaf certificate is for.
type certSpec = testpki.Spec

// newCA creates a CA and writes <dir>/<name>.crt and .key.
func newCA(dir, name string) (*CA, error) {
	// Distinct names: a verifier tries each CA whose name matches the
	// issuer, and a same-named wrong CA costs a failing signature check.
	ca, err := testpki.NewCA(filepath.Base(dir) + "-" + name)
	if err != nil {
		return nil, err
	}
	certFile, _, err := ca.WriteFiles(dir, name)
	if err != nil {
		return nil, err
	}
	return &CA{CA: ca, CertFile: certFile}, nil
}

// issue signs a leaf certificate and writes <dir>/<name>.crt and .key.
func (ca *CA) issue(dir, name string, spec certSpec) (*KeyPair, error) {
	p, err := ca.Issue(spec)
	if err != nil {
		return nil, err
	}
	certFile, keyFile, err := p.WriteFiles(dir, name)
	if err != nil {
		return nil, err
	}
	return &KeyPair{Pair: p, CertFile: certFile, KeyFile: keyFile}, nil
}

// newSigningKey writes a service-account signing key pair: <name>.key and <name>.pub.
func newSigningKey(dir, name string) (keyFile, pubFile string, err error) {
	keyPEM, pubPEM, err := testpki.NewSigningKey()
	if err != nil {
		return "", "", err
	}
	keyFile, pubFile = filepath.Join(dir, name+".key"), filepath.Join(dir, name+".pub")
	return keyFile, pubFile, writeFiles(map[string][]byte{keyFile: keyPEM, pubFile: pubPEM})
}

func writeFiles(files map[string][]byte) error {
	for path, data := range files {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return err
		}
	}
	return nil
}
