package health

import (
	"fmt"
	"time"
)

// Options configure the prober. They are plain config: the flags that
// fill them are defined in cmd/apiserver/app/options. NewOptions has the
// defaults, Validate the rules; New refuses what Validate refuses.
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
