package options

import (
	"github.com/spf13/pflag"

	"github.com/clustergateway/cluster-gateway/pkg/fairness"
)

// addFairnessFlags adds the per-cluster limits' flags, which fill o
// (pkg/fairness's plain config).
func addFairnessFlags(o *fairness.Config, fs *pflag.FlagSet) {
	fs.IntVar(&o.MaxRequests, "max-requests-per-cluster", o.MaxRequests, "Most ordinary proxied requests in flight to one cluster; more wait in its queue (0: no bound). Keep it plus --max-queued-per-cluster well under --max-requests-inflight and --max-mutating-requests-inflight: each held or queued request takes one of those slots.")
	fs.IntVar(&o.MaxStreams, "max-streams-per-cluster", o.MaxStreams, "Most long-running proxied requests (watch, logs -f, exec, attach, port-forward) in flight to one cluster; counted apart from ordinary requests (0: no bound).")
	fs.IntVar(&o.MaxStreamsPerUser, "max-streams-per-user-per-cluster", o.MaxStreamsPerUser, "Most long-running proxied requests that one hub user may have in flight or waiting for one cluster; the user's next one gets 429 at once, so that one user cannot hold a cluster's every stream slot with idle watches (0: no per-user bound). At most --max-streams-per-cluster.")
	fs.IntVar(&o.MaxQueued, "max-queued-per-cluster", o.MaxQueued, "Most requests of one kind (ordinary or long-running) waiting for a slot of one cluster, served round-robin among hub users; beyond it the gateway answers 429 with Retry-After (0: no queue).")
	fs.DurationVar(&o.QueueWait, "queue-wait-timeout", o.QueueWait, "Longest a proxied request waits in its cluster's queue before the gateway answers 429 with Retry-After.")
}
