package konnectivity

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"

	"github.com/clustergateway/cluster-gateway/pkg/cabundle"
)

// rawMaterial is the content of the three files as read.
type rawMaterial struct {
	ca, cert, key []byte
}

// material is validated mTLS material; id names it (and the tunnels built from it).
type material struct {
	id    string
	roots *x509.CertPool
	pair  tls.Certificate
}

func readMaterial(o Config) (rawMaterial, error) {
	var r rawMaterial
	var errs []error
	for _, f := range []struct {
		path string
		dst  *[]byte
	}{{o.CAFile, &r.ca}, {o.CertFile, &r.cert}, {o.KeyFile, &r.key}} {
		b, err := os.ReadFile(f.path)
		if err != nil {
			errs = append(errs, err)
		}
		*f.dst = b
	}
	return r, errors.Join(errs...)
}

// digest identifies content: equal files give equal digests, so unchanged
// files are skipped and a rotation changes the tunnel identity.
func (r rawMaterial) digest() string {
	h := sha256.New()
	for _, b := range [][]byte{r.ca, r.cert, r.key} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// parse validates the material: the CA must hold at least one certificate (an
// empty pool would fall back to nothing verifiable), and cert and key must
// parse and match.
func (r rawMaterial) parse(o Config) (*material, error) {
	roots, err := cabundle.Parse(r.ca)
	if err != nil {
		return nil, fmt.Errorf("CA file %s: %v; it must contain the CA that signed the proxy-server's serving certificate", o.CAFile, err)
	}
	pair, err := tls.X509KeyPair(r.cert, r.key)
	if err != nil {
		return nil, fmt.Errorf("client cert %s / key %s are unusable (both must be PEM and belong together): %w", o.CertFile, o.KeyFile, err)
	}
	return &material{id: r.digest(), roots: roots, pair: pair}, nil
}

func loadMaterial(o Config) (*material, error) {
	r, err := readMaterial(o)
	if err != nil {
		return nil, fmt.Errorf("reading konnectivity client material: %w", err)
	}
	return r.parse(o)
}

// tlsConfig verifies the proxy-server against the CA (never insecure); the
// server name defaults to the Address host (set by grpc's TLS credentials).
func (m *material) tlsConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		RootCAs:      m.roots,
		Certificates: []tls.Certificate{m.pair},
	}
}
