package fairness

import (
	"fmt"
	"time"
)

// Config bounds each cluster: plain config whose flags are defined in
// cmd/apiserver/app/options. DefaultConfig has the defaults, Validate the
// rules; New refuses what Validate refuses.
type Config struct {
	// MaxRequests is the most ordinary requests in flight to one cluster;
	// 0: no bound (and no queue) for them.
	MaxRequests int
	// MaxStreams is the most long-running requests (watch, logs -f, exec,
	// attach, port-forward) in flight to one cluster; 0: no bound.
	MaxStreams int
	// MaxStreamsPerUser is the most of one cluster's stream slots that one
	// hub user may hold or wait for; beyond it the user's next stream is
	// refused at once. A stream may hold its slot for hours (an idle
	// watch), so without it one user could keep every other user's watch,
	// logs -f and exec out of a cluster. 0: no per-user bound.
	MaxStreamsPerUser int
	// MaxQueued is the most requests of one kind waiting for a slot of one
	// cluster; beyond it they are refused at once. 0: no queue.
	MaxQueued int
	// QueueWait bounds the time a request waits in the queue.
	QueueWait time.Duration
}

// DefaultConfig returns the defaults. An ordinary request holds one of the
// generic server's --max-requests-inflight slots (default 400) while it is
// in flight or queued, so MaxRequests+MaxQueued (48) is kept well under it:
// eight clusters saturated at once still leave room for the others.
func DefaultConfig() *Config {
	return &Config{
		MaxRequests: 16,
		MaxStreams:  500,
		// Half: one user cannot take a cluster's streams from everyone
		// else, and a controller that watches every resource type of a
		// cluster (Argo CD's cluster cache: a hundred watches or more)
		// still fits.
		MaxStreamsPerUser: 250,
		MaxQueued:         32,
		QueueWait:         10 * time.Second,
	}
}

// Validate refuses values the limiter cannot work with.
func (c *Config) Validate() []error {
	var errs []error
	for _, v := range []struct {
		flag string
		n    int
	}{
		{"--max-requests-per-cluster", c.MaxRequests},
		{"--max-streams-per-cluster", c.MaxStreams},
		{"--max-queued-per-cluster", c.MaxQueued},
		{"--max-streams-per-user-per-cluster", c.MaxStreamsPerUser},
	} {
		if v.n < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative (0: no bound), not %d", v.flag, v.n))
		}
	}
	if c.MaxStreams > 0 && c.MaxStreamsPerUser > c.MaxStreams {
		errs = append(errs, fmt.Errorf("--max-streams-per-user-per-cluster (%d) must not be more than --max-streams-per-cluster (%d)", c.MaxStreamsPerUser, c.MaxStreams))
	}
	if c.MaxQueued > 0 && c.QueueWait <= 0 {
		errs = append(errs, fmt.Errorf("--queue-wait-timeout must be positive when --max-queued-per-cluster is, not %v", c.QueueWait))
	}
	return errs
}
