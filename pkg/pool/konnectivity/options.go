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
	// Address is the proxy-server's host:port (its --server-port, gRPC mode).
	// The host is also the name its serving certificate is verified for.
	// Empty: no proxy-server, and Konnectivity endpoints cannot be reached.
	Address string
	// CAFile verifies the proxy-server's serving certificate; CertFile and
	// KeyFile are the gateway's client certificate. They may rotate on disk.
	CAFile, CertFile, KeyFile string
	// ReloadInterval is how often the files are re-read and compared by content.
	ReloadInterval time.Duration

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
	return &Options{ReloadInterval: 10 * time.Second, RetireGrace: 5 * time.Minute, DialTimeout: 10 * time.Second}
}

// Enabled tells whether a proxy-server is configured.
func (o *Options) Enabled() bool { return o.Address != "" }

// AddFlags adds the konnectivity flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Address, "konnectivity-server-address", o.Address, "host:port of the konnectivity proxy-server (gRPC mode) that Konnectivity endpoints are dialed through.")
	fs.StringVar(&o.CAFile, "konnectivity-ca-file", o.CAFile, "CA that signs the proxy-server's serving certificate. Reloaded on change.")
	fs.StringVar(&o.CertFile, "konnectivity-cert-file", o.CertFile, "Client certificate for the proxy-server. Reloaded on change.")
	fs.StringVar(&o.KeyFile, "konnectivity-key-file", o.KeyFile, "Client key for the proxy-server. Reloaded on change.")
	fs.DurationVar(&o.ReloadInterval, "konnectivity-reload-interval", o.ReloadInterval, "How often the konnectivity CA, certificate and key files are re-read (all three at once, compared by content).")
}

// Validate checks the flags of an enabled Manager (without an address there
// is nothing to check). RetireGrace and DialTimeout are the pool's flags and
// checked there; New checks them too.
func (o *Options) Validate() []error {
	if !o.Enabled() {
		return nil
	}
	var errs []error
	if _, _, err := net.SplitHostPort(o.Address); err != nil {
		errs = append(errs, fmt.Errorf("--konnectivity-server-address must be host:port: %v", err))
	}
	if o.CAFile == "" || o.CertFile == "" || o.KeyFile == "" {
		errs = append(errs, errors.New("--konnectivity-ca-file, --konnectivity-cert-file and --konnectivity-key-file are all required with --konnectivity-server-address: the proxy-server is reached with mTLS only"))
	}
	if o.ReloadInterval <= 0 {
		errs = append(errs, fmt.Errorf("--konnectivity-reload-interval must be positive, not %v", o.ReloadInterval))
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
