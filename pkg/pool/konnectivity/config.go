package konnectivity

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/clustergateway/cluster-gateway/pkg/endpointpolicy"
)

// Config configures a Manager: plain config whose flags are defined in
// cmd/apiserver/app/options. DefaultConfig has the defaults, Validate the
// rules; New refuses what Validate refuses.
type Config struct {
	// Addresses are the proxy-servers' host:port (their --server-port, gRPC
	// mode), one tunnel each; every host is also the name its serving
	// certificate is verified for. Agents must reach every one of them
	// (proxy-server --server-count), since a proxy-server routes only to the
	// agents connected to it. Empty: no proxy-server, and Konnectivity
	// endpoints cannot be reached.
	Addresses []string
	// CAFile verifies the proxy-server's serving certificate; CertFile and
	// KeyFile are the gateway's client certificate. They may rotate on disk.
	CAFile, CertFile, KeyFile string
	// ReloadInterval is how often the files are re-read and compared by content.
	ReloadInterval time.Duration
	// HealthInterval is how often each tunnel asks its proxy-server for a
	// round trip; one not answered within HealthTimeout is a miss (see
	// HealthFailureThreshold). gRPC keepalive cannot do this within seconds: the
	// proxy-server refuses client pings more often than every 5 minutes.
	HealthInterval, HealthTimeout time.Duration
	// HealthFailureThreshold is how many checks in a row a tunnel may miss
	// before it is closed and rebuilt (its streams end). From the first
	// miss until an answer it takes no new dials, so new requests go to
	// the other proxy-servers at once, while one slow answer (a GC pause,
	// CPU throttling) does not cut live watches and exec sessions.
	HealthFailureThreshold int

	// RetireGrace and DialTimeout have the meaning and the flags of the
	// pool's (--retire-grace-period, --dial-timeout): the assembler copies
	// them. RetireGrace 0 closes a replaced tunnel at once.
	RetireGrace time.Duration
	DialTimeout time.Duration

	// Endpoints is the gateway's endpoint policy (--endpoint-deny-cidrs,
	// --endpoint-allow-cidrs; the assembler copies it): each address asked
	// of the tunnel is judged as written, since the agent resolves it. Nil
	// allows all.
	Endpoints *endpointpolicy.Policy
}

// DefaultConfig returns the defaults (no proxy-server).
func DefaultConfig() *Config {
	return &Config{ReloadInterval: 10 * time.Second, HealthInterval: time.Second, HealthTimeout: time.Second,
		HealthFailureThreshold: 3, RetireGrace: 5 * time.Minute, DialTimeout: 10 * time.Second}
}

// Enabled tells whether a proxy-server is configured.
func (c *Config) Enabled() bool { return len(c.Addresses) > 0 }

// Validate checks the flags of an enabled Manager (without an address there
// is nothing to check). RetireGrace and DialTimeout are the pool's flags and
// checked there; New checks them too.
func (c *Config) Validate() []error {
	if !c.Enabled() {
		return nil
	}
	var errs []error
	seen := map[string]bool{}
	for _, a := range c.Addresses {
		if strings.TrimSpace(a) != a {
			errs = append(errs, fmt.Errorf("--konnectivity-server-address %q has white space around it; separate addresses with commas only", a))
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			errs = append(errs, fmt.Errorf("--konnectivity-server-address must be host:port, not %q: %v", a, err))
		}
		if seen[a] {
			errs = append(errs, fmt.Errorf("--konnectivity-server-address lists %s twice; name each proxy-server once", a))
		}
		seen[a] = true
	}
	if c.CAFile == "" || c.CertFile == "" || c.KeyFile == "" {
		errs = append(errs, errors.New("--konnectivity-ca-file, --konnectivity-cert-file and --konnectivity-key-file are all required with --konnectivity-server-address: the proxy-server is reached with mTLS only"))
	}
	if c.ReloadInterval <= 0 {
		errs = append(errs, fmt.Errorf("--konnectivity-reload-interval must be positive, not %v", c.ReloadInterval))
	}
	if c.HealthInterval <= 0 {
		errs = append(errs, fmt.Errorf("--konnectivity-health-interval must be positive, not %v", c.HealthInterval))
	}
	if c.HealthTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--konnectivity-health-timeout must be positive, not %v", c.HealthTimeout))
	}
	if c.HealthFailureThreshold < 1 {
		errs = append(errs, fmt.Errorf("--konnectivity-health-failure-threshold must be at least 1, not %d", c.HealthFailureThreshold))
	}
	return errs
}

// validateShared checks the values the assembler copies from the pool.
func (c *Config) validateShared() []error {
	var errs []error
	if c.RetireGrace < 0 {
		errs = append(errs, fmt.Errorf("--retire-grace-period must not be negative, not %v", c.RetireGrace))
	}
	if c.DialTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--dial-timeout must be positive, not %v", c.DialTimeout))
	}
	return errs
}
