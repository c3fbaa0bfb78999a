package pool

import (
	"crypto/tls"
	"fmt"

	"github.com/clustergateway/cluster-gateway/pkg/cabundle"
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
		roots, err := cabundle.Parse(t.CAData)
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
