package pool

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/clustergateway/cluster-gateway/pkg/cabundle"
)

// entryTLS is what an entry's TLS connections are made of. It keeps the CA
// bundle as PEM and parses it for each handshake rather than keeping the
// parsed pool: a parsed CA certificate and its pool are a tenth of a pooled
// entry's memory (with a thousand entries, megabytes), while parsing one
// costs microseconds against the handshake's milliseconds, once per
// connection, not per request.
type entryTLS struct {
	base   *tls.Config // without RootCAs; never handed out, only cloned
	caData []byte      // PEM, validated when the entry was built; empty: system roots
	// first is the bundle as parsed to validate it, for the entry's first
	// handshake (most entries make one connection); later ones parse anew.
	first atomic.Pointer[x509.CertPool]
}

// tlsFor validates the TLS material of an entry's Target and builds its
// entryTLS from s, the entry's private copy of it: a caller changing its
// buffers afterwards cannot change whom the entry trusts.
func tlsFor(s *shape) (*entryTLS, error) {
	base := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         s.serverName,
		InsecureSkipVerify: s.insecure, //nolint:gosec // explicit per-cluster opt-in, validated against CAData
	}
	var roots *x509.CertPool
	if len(s.caData) > 0 {
		var err error
		if roots, err = cabundle.Parse(s.caData); err != nil {
			return nil, fmt.Errorf("%w: cluster %q CA bundle: %v; fix caData in the ClusterGateway secret", ErrInvalidTarget, s.cluster, err)
		}
	}
	if len(s.certData) > 0 {
		cert, err := tls.X509KeyPair(s.certData, s.keyData)
		if err != nil {
			return nil, fmt.Errorf("%w: cluster %q client certificate: %v; fix certData/keyData in the ClusterGateway secret", ErrInvalidTarget, s.cluster, err)
		}
		// A client does not need its certificate parsed (crypto/tls parses
		// it in a handshake only to match the CAs a server names), and the
		// parsed form would be kept for the entry's life.
		cert.Leaf = nil
		base.Certificates = []tls.Certificate{cert}
	}
	c := &entryTLS{base: base, caData: s.caData}
	c.first.Store(roots)
	return c, nil
}

// config is a new TLS config offering protos, with the CA bundle parsed.
// A bundle that no longer parses (it was validated when the entry was
// built, and the entry's copy does not change) trusts no server.
func (c *entryTLS) config(protos ...string) *tls.Config {
	cfg := c.base.Clone()
	if len(c.caData) > 0 {
		roots := c.first.Swap(nil)
		if roots == nil {
			var err error
			if roots, err = cabundle.Parse(c.caData); err != nil {
				roots = x509.NewCertPool()
			}
		}
		cfg.RootCAs = roots
	}
	cfg.NextProtos = protos
	return cfg
}

// handshake makes conn, dialed to addr, a verified TLS client connection
// offering protos, within timeout: what http.Transport does for a plain
// dial, with a config whose CA bundle is parsed for this handshake only.
func (c *entryTLS) handshake(ctx context.Context, conn net.Conn, addr string, timeout time.Duration, protos ...string) (*tls.Conn, error) {
	cfg := c.config(protos...)
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		cfg.ServerName = host
	}
	tc := tls.Client(conn, cfg)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
	}
	return tc, nil
}
