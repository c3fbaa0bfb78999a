package options

import (
	"github.com/spf13/pflag"

	"github.com/clustergateway/cluster-gateway/pkg/health"
)

// addHealthFlags adds the prober's flags, which fill o (pkg/health's plain
// config).
func addHealthFlags(o *health.Config, fs *pflag.FlagSet) {
	fs.DurationVar(&o.Interval, "probe-interval", o.Interval, "How often each cluster's /readyz is probed through the gateway (with ±10% jitter).")
	fs.DurationVar(&o.Timeout, "probe-timeout", o.Timeout, "Bound on one probe; a cluster slower than this is not reachable.")
	fs.IntVar(&o.FailureThreshold, "probe-failure-threshold", o.FailureThreshold, "Consecutive failed probes after which a cluster is Reachable=False and proxied requests to it fail at once with 503.")
	fs.IntVar(&o.SuccessThreshold, "probe-success-threshold", o.SuccessThreshold, "Consecutive good probes after which an unreachable cluster is Reachable=True again.")
	fs.DurationVar(&o.MaxBackoff, "probe-max-backoff", o.MaxBackoff, "Longest interval between probes of a cluster that keeps failing (the interval doubles up to it); a failed proxied request probes at once.")
	fs.IntVar(&o.Workers, "probe-workers", o.Workers, "Probes that run at once, however many clusters there are.")
}
