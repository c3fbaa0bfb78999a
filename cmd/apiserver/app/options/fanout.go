package options

import (
	"github.com/spf13/pflag"

	"github.com/clustergateway/cluster-gateway/pkg/fanout"
)

// addFanoutFlags adds the flags of reads across a set of clusters
// (clustersets/<set>/proxy, pkg/fanout).
func addFanoutFlags(c *fanout.Config, fs *pflag.FlagSet) {
	fs.IntVar(&c.MaxClusters, "fanout-max-clusters", c.MaxClusters, "Most clusters one list through a set of clusters (clustersets/<set>/proxy) reads at once; the others wait for one of them to finish a page (0: every cluster of the set at once). A watch holds every cluster's stream.")
	fs.DurationVar(&c.ClusterTimeout, "fanout-cluster-timeout", c.ClusterTimeout, "Longest one cluster may take to answer one page of a list through a set, or to begin its watch; a cluster that takes longer becomes a warning and the other clusters' answer still arrives (0: only the request's own timeout).")
	fs.DurationVar(&c.FirstRowWait, "fanout-first-row-wait", c.FirstRowWait, "Longest a list through a set waits, once the first cluster's page has come, for the other clusters' first pages before its answer begins: it waits a tenth of the time that first page took, at most this. A cluster that fails before the answer begins is a warning header; one that fails later stays in the list's continue token, and the next page reads it first (0: the answer begins with the first page).")
	fs.IntVar(&c.PageSize, "fanout-page-size", c.PageSize, "How many items a list through a set that asks no limit reads of each cluster at a time. The gateway holds about a page per cluster it reads at once (--fanout-max-clusters), so a smaller page holds less memory and asks each cluster more often.")
}
