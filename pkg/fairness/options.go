package fairness

import (
	"fmt"
	"time"
)

// Options bound each cluster. They are plain config: the flags that
// fill them are defined in cmd/apiserver/app/options. NewOptions has the
// defaults, Validate the rules; New refuses what Validate refuses.
type Options struct {
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

// NewOptions returns the defaults. An ordinary request holds one of the
// generic server's --max-requests-inflight slots (default 400) while it is
// in flight or queued, so MaxRequests+MaxQueued (48) is kept well under it:
// eight clusters saturated at once still leave room for the others.
func NewOptions() *Options {
	return &Options{
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
func (o *Options) Validate() []error {
	var errs []error
	for _, v := range []struct {
		flag string
		n    int
	}{
		{"--max-requests-per-cluster", o.MaxRequests},
		{"--max-streams-per-cluster", o.MaxStreams},
		{"--max-queued-per-cluster", o.MaxQueued},
		{"--max-streams-per-user-per-cluster", o.MaxStreamsPerUser},
	} {
		if v.n < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative (0: no bound), not %d", v.flag, v.n))
		}
	}
	if o.MaxStreams > 0 && o.MaxStreamsPerUser > o.MaxStreams {
		errs = append(errs, fmt.Errorf("--max-streams-per-user-per-cluster (%d) must not be more than --max-streams-per-cluster (%d)", o.MaxStreamsPerUser, o.MaxStreams))
	}
	if o.MaxQueued > 0 && o.QueueWait <= 0 {
		errs = append(errs, fmt.Errorf("--queue-wait-timeout must be positive when --max-queued-per-cluster is, not %v", o.QueueWait))
	}
	return errs
}
