package health

import (
	"fmt"
	"time"
)

// Config configures the prober: plain config whose flags are defined in
// cmd/apiserver/app/options. DefaultConfig has the defaults, Validate the
// rules; New refuses what Validate refuses.
type Config struct {
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

// DefaultConfig returns the defaults.
func DefaultConfig() *Config {
	return &Config{Interval: 20 * time.Second, Timeout: 5 * time.Second, FailureThreshold: 2, SuccessThreshold: 1, MaxBackoff: 2 * time.Minute, Workers: 8}
}

// Validate refuses values the prober cannot work with.
func (c *Config) Validate() []error {
	var errs []error
	if c.Interval <= 0 {
		errs = append(errs, fmt.Errorf("--probe-interval must be positive, not %v", c.Interval))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--probe-timeout must be positive, not %v", c.Timeout))
	}
	if c.FailureThreshold < 1 {
		errs = append(errs, fmt.Errorf("--probe-failure-threshold must be at least 1, not %d", c.FailureThreshold))
	}
	if c.SuccessThreshold < 1 {
		errs = append(errs, fmt.Errorf("--probe-success-threshold must be at least 1, not %d", c.SuccessThreshold))
	}
	if c.MaxBackoff < c.Interval {
		errs = append(errs, fmt.Errorf("--probe-max-backoff (%v) must be at least --probe-interval (%v)", c.MaxBackoff, c.Interval))
	}
	if c.Workers < 1 {
		errs = append(errs, fmt.Errorf("--probe-workers must be at least 1, not %d", c.Workers))
	}
	return errs
}
