package health

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"
)

// Options configure the prober. NewOptions has the defaults, AddFlags the
// flags, Validate the rules; New refuses what Validate refuses.
type Options struct {
	// Interval is how often a reachable cluster is probed.
	Interval time.Duration
	// Timeout bounds one probe.
	Timeout time.Duration
	// FailureThreshold consecutive failed probes make a cluster unreachable;
	// SuccessThreshold consecutive good ones make it reachable again.
	FailureThreshold, SuccessThreshold int
	// MaxBackoff caps the probing interval of a cluster that keeps failing:
	// it doubles from Interval after each failure beyond the threshold.
	MaxBackoff time.Duration
	// Workers is how many probes run at once, however many clusters there are.
	Workers int
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{Interval: 20 * time.Second, Timeout: 5 * time.Second, FailureThreshold: 2, SuccessThreshold: 1, MaxBackoff: 2 * time.Minute, Workers: 8}
}

// AddFlags adds the prober's flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.Interval, "probe-interval", o.Interval, "How often each cluster's /readyz is probed through the gateway (with ±10% jitter).")
	fs.DurationVar(&o.Timeout, "probe-timeout", o.Timeout, "Bound on one probe; a cluster slower than this is not reachable.")
	fs.IntVar(&o.FailureThreshold, "probe-failure-threshold", o.FailureThreshold, "Consecutive failed probes after which a cluster is Reachable=False and proxied requests to it fail at once with 503.")
	fs.IntVar(&o.SuccessThreshold, "probe-success-threshold", o.SuccessThreshold, "Consecutive good probes after which an unreachable cluster is Reachable=True again.")
	fs.DurationVar(&o.MaxBackoff, "probe-max-backoff", o.MaxBackoff, "Longest interval between probes of a cluster that keeps failing (the interval doubles up to it); a failed proxied request probes at once.")
	fs.IntVar(&o.Workers, "probe-workers", o.Workers, "Probes that run at once, however many clusters there are.")
}

// Validate refuses values the prober cannot work with.
func (o *Options) Validate() []error {
	var errs []error
	if o.Interval <= 0 {
		errs = append(errs, fmt.Errorf("--probe-interval must be positive, not %v", o.Interval))
	}
	if o.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--probe-timeout must be positive, not %v", o.Timeout))
	}
	if o.FailureThreshold < 1 {
		errs = append(errs, fmt.Errorf("--probe-failure-threshold must be at least 1, not %d", o.FailureThreshold))
	}
	if o.SuccessThreshold < 1 {
		errs = append(errs, fmt.Errorf("--probe-success-threshold must be at least 1, not %d", o.SuccessThreshold))
	}
	if o.MaxBackoff < o.Interval {
		errs = append(errs, fmt.Errorf("--probe-max-backoff (%v) must be at least --probe-interval (%v)", o.MaxBackoff, o.Interval))
	}
	if o.Workers < 1 {
		errs = append(errs, fmt.Errorf("--probe-workers must be at least 1, not %d", o.Workers))
	}
	return errs
}
