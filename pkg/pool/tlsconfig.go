package pool

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
)

// tlsConfigFor builds the client TLS config of one entry. It is cloned for the
// upgrade transport, so nothing here may be shared mutable state.
func tlsConfigFor(t *Target) (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.Insecure, //nolint:gosec // explicit per-cluster opt-in, validated against CAData
	}
	if len(t.CAData) > 0 {
		roots, err := parseCABundle(t.CAData)
		if err != nil {
			return nil, fmt.Errorf("%w: cluster %q CA bundle: %v; fix caData in the ClusterGateway secret", ErrInvalidTarget, t.Cluster, err)
		}
		cfg.RootCAs = roots
	}
	if len(t.CertData) > 0 {
		cert, err := tls.X509KeyPair(t.CertData, t.KeyData)
		if err != nil {
			return nil, fmt.Errorf("%w: cluster %q client certificate: %v; fix certData/keyData in the ClusterGateway secret", ErrInvalidTarget, t.Cluster, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// parseCABundle is strict where x509.CertPool.AppendCertsFromPEM is lenient:
// that one skips unparsable blocks and an empty pool silently rejects every
// server. Here every PEM block must be a valid CERTIFICATE, a truncated block
// is an error, and there must be at least one. Text between blocks stays
// allowed (RFC 7468 explanatory text, as in distribution CA bundles).
func parseCABundle(data []byte) (*x509.CertPool, error) {
	roots := x509.NewCertPool()
	n := 0
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d is %q, want CERTIFICATE", n+1, block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %v", n+1, err)
		}
		roots.AddCert(cert)
		n++
	}
	if bytes.Contains(rest, []byte("-----BEGIN")) {
		return nil, fmt.Errorf("truncated or malformed PEM block after certificate %d", n)
	}
	if n == 0 {
		return nil, fmt.Errorf("no certificates found")
	}
	return roots, nil
}
