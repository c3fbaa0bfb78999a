package konnectivity

import (
	"errors"
	"fmt"
	"time"
)

// Options configures a Manager.
type Options struct {
	// Address is the proxy-server's host:port (its --server-port, gRPC mode).
	// The host is also the name its serving certificate is verified for.
	Address string
	// CAFile verifies the proxy-server's serving certificate; CertFile and
	// KeyFile are the gateway's client certificate. They may rotate on disk.
	CAFile, CertFile, KeyFile string
	// ReloadInterval is how often the files are re-read and compared by content.
	ReloadInterval time.Duration
	// RetireGrace is how long a replaced tunnel keeps serving its live
	// connections before it is closed.
	RetireGrace time.Duration
	// DialTimeout bounds one dial through the tunnel and one tunnel build.
	DialTimeout time.Duration
}

// Defaults for zero durations.
const (
	DefaultReloadInterval = 10 * time.Second
	DefaultRetireGrace    = 2 * time.Minute
	DefaultDialTimeout    = 10 * time.Second
)

func (o Options) withDefaults() (Options, error) {
	var errs []error
	if o.Address == "" {
		errs = append(errs, errors.New("konnectivity: Address is empty; set it to the proxy-server's host:port"))
	}
	if o.CAFile == "" || o.CertFile == "" || o.KeyFile == "" {
		errs = append(errs, errors.New("konnectivity: CAFile, CertFile and KeyFile are all required; the proxy-server is reached with mTLS only"))
	}
	for name, d := range map[string]*time.Duration{"ReloadInterval": &o.ReloadInterval, "RetireGrace": &o.RetireGrace, "DialTimeout": &o.DialTimeout} {
		if *d < 0 {
			errs = append(errs, fmt.Errorf("konnectivity: %s is negative (%v); use 0 for the default", name, *d))
		}
	}
	if o.ReloadInterval == 0 {
		o.ReloadInterval = DefaultReloadInterval
	}
	if o.RetireGrace == 0 {
		o.RetireGrace = DefaultRetireGrace
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	return o, errors.Join(errs...)
}
