// Package cabundle parses PEM CA bundles strictly, one way for the whole
// gateway: the API's validation, the pool's TLS configuration and the
// konnectivity client must agree on what a usable bundle is, or a gateway
// could be accepted as Ready and then fail on every request.
package cabundle

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
)

// Parse is strict where x509.CertPool.AppendCertsFromPEM is lenient (that one
// skips unparsable blocks, and an empty pool silently rejects every server):
// every PEM block must be a valid CERTIFICATE, a truncated block is an error,
// and there must be at least one. Text between blocks stays allowed (RFC 7468
// explanatory text, as in distribution CA bundles).
func Parse(data []byte) (*x509.CertPool, error) {
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
			return nil, fmt.Errorf("PEM block %d is %q, not a CERTIFICATE: a CA bundle holds only certificates", n+1, block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d does not parse: %v", n+1, err)
		}
		roots.AddCert(cert)
		n++
	}
	if bytes.Contains(rest, []byte("-----BEGIN")) {
		return nil, fmt.Errorf("truncated or malformed PEM block after certificate %d", n)
	}
	if n == 0 {
		return nil, fmt.Errorf("no PEM certificate (-----BEGIN CERTIFICATE-----) found")
	}
	return roots, nil
}
