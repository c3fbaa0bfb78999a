package options

import "github.com/spf13/pflag"

// addClusterMetricsFlags adds the flag of the opt-in per-cluster series
// (pkg/clustermetrics, docs/metrics.md#per-cluster-series).
func (o *Options) addClusterMetricsFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.ClusterMetrics.MaxClusters, "per-cluster-metrics-max-clusters", o.ClusterMetrics.MaxClusters, "Serve per-cluster series (cluster_gateway_cluster_*, labelled cluster_name: reachable, credential expiry, last successful probe) for at most this many clusters, the first by name; cluster_gateway_cluster_series_omitted_clusters counts the rest. Up to 3 series per cluster on every replica's /metrics. 0 (the default): none, and no metric has a cluster label.")
}
