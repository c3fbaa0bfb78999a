package konnectivity

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/spf13/pflag"

	"github.com/clustergateway/cluster-gateway/pkg/endpointpolicy"
)

// Options configure a Manager. NewOptions has the defaults, AddFlags the
// flags, Validate the rules; New refuses what Validate refuses.
type Options struct {
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
	// round trip; one not answered within HealthTimeout ends that tunnel
	// (its streams end with an error, new dials go to the other servers)
	// and it is rebuilt. gRPC keepalive cannot do this within seconds: the
	// proxy-server refuses client pings more often than every 5 minutes.
	HealthInterval, HealthTimeout time.Duration

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

// NewOptions returns the defaults (no proxy-server).
func NewOptions() *Options {
	return &Options{ReloadInterval: 10 * time.Second, HealthInterval: time.Second, HealthTimeout: time.Second,
		RetireGrace: 5 * time.Minute, DialTimeout: 10 * time.Second}
}

// Enabled tells whether a proxy-server is configured.
func (o *Options) Enabled() bool { return len(o.Addresses) > 0 }

// AddFlags adds the konnectivity flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringSliceVar(&o.Addresses, "konnectivity-server-address", o.Addresses, "host:port of a konnectivity proxy-server (gRPC mode) that Konnectivity endpoints are dialed through; repeat it or separate with commas for several proxy-servers (the gateway keeps a tunnel to each and dials through the healthy ones; agents must connect to every one).")
	fs.StringVar(&o.CAFile, "konnectivity-ca-file", o.CAFile, "CA that signs the proxy-server's serving certificate. Reloaded on change.")
	fs.StringVar(&o.CertFile, "konnectivity-cert-file", o.CertFile, "Client certificate for the proxy-server. Reloaded on change.")
	fs.StringVar(&o.KeyFile, "konnectivity-key-file", o.KeyFile, "Client key for the proxy-server. Reloaded on change.")
	fs.DurationVar(&o.ReloadInterval, "konnectivity-reload-interval", o.ReloadInterval, "How often the konnectivity CA, certificate and key files are re-read (all three at once, compared by content).")
	fs.DurationVar(&o.HealthInterval, "konnectivity-health-interval", o.HealthInterval, "How often the gateway checks that each proxy-server answers on its tunnel.")
	fs.DurationVar(&o.HealthTimeout, "konnectivity-health-timeout", o.HealthTimeout, "How long a proxy-server may take to answer a health check before its tunnel is closed (its streams end, new dials go to the other proxy-servers) and rebuilt.")
}

// Validate checks the flags of an enabled Manager (without an address there
// is nothing to check). RetireGrace and DialTimeout are the pool's flags and
// checked there; New checks them too.
func (o *Options) Validate() []error {
	if !o.Enabled() {
		return nil
	}
	var errs []error
	seen := map[string]bool{}
	for _, a := range o.Addresses {
		if _, _, err := net.SplitHostPort(a); err != nil {
			errs = append(errs, fmt.Errorf("--konnectivity-server-address must be host:port, not %q: %v", a, err))
		}
		if seen[a] {
			errs = append(errs, fmt.Errorf("--konnectivity-server-address lists %s twice; name each proxy-server once", a))
		}
		seen[a] = true
	}
	if o.CAFile == "" || o.CertFile == "" || o.KeyFile == "" {
		errs = append(errs, errors.New("--konnectivity-ca-file, --konnectivity-cert-file and --konnectivity-key-file are all required with --konnectivity-server-address: the proxy-server is reached with mTLS only"))
	}
	if o.ReloadInterval <= 0 {
		errs = append(errs, fmt.Errorf("--konnectivity-reload-interval must be positive, not %v", o.ReloadInterval))
	}
	if o.HealthInterval <= 0 {
		errs = append(errs, fmt.Errorf("--konnectivity-health-interval must be positive, not %v", o.HealthInterval))
	}
	if o.HealthTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--konnectivity-health-timeout must be positive, not %v", o.HealthTimeout))
	}
	return errs
}

// validateShared checks the values the assembler copies from the pool.
func (o *Options) validateShared() []error {
	var errs []error
	if o.RetireGrace < 0 {
		errs = append(errs, fmt.Errorf("--retire-grace-period must not be negative, not %v", o.RetireGrace))
	}
	if o.DialTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--dial-timeout must be positive, not %v", o.DialTimeout))
	}
	return errs
}
