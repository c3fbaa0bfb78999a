// Package clustermetrics serves the opt-in per-cluster series: whether each
// cluster is reachable, when its credential expires and when it last
// answered a probe, labelled with the ClusterGateway's name, for at most
// Config.MaxClusters clusters (the first by name) so that the number of
// series stays bounded however many gateways there are. Everything is read
// from the gateway store and the prober when scraped: nothing is kept per
// cluster here, so a deleted gateway's series end with its deletion.
package clustermetrics

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics"

	"github.com/clustergateway/cluster-gateway/pkg/gateways"
	"github.com/clustergateway/cluster-gateway/pkg/health"
)

// Config is the per-cluster series' configuration (the flag
// --per-cluster-metrics-max-clusters).
type Config struct {
	// MaxClusters is how many clusters get series of their own, the first
	// by name; 0: none, and none of this package's metrics is registered.
	MaxClusters int
}

// Validate refuses a negative bound.
func (c Config) Validate() error {
	if c.MaxClusters < 0 {
		return fmt.Errorf("--per-cluster-metrics-max-clusters must not be negative, not %d", c.MaxClusters)
	}
	return nil
}

// LabelCluster is the label that names a cluster: cluster_name, as Cluster
// API's capi_cluster_cache_healthcheck has it, and not cluster, which many
// Prometheus setups add to every series to name the Prometheus' own cluster.
const LabelCluster = "cluster_name"

// Source is what the series are read from.
type Source interface {
	// Gateways lists every gateway.
	Gateways() []*gateways.Gateway
	// Probe returns what the prober knows of the named cluster.
	Probe(name string) (health.Result, bool)
}

type storeSource struct {
	store  *gateways.Store
	prober *health.Prober
}

func (s storeSource) Gateways() []*gateways.Gateway {
	gws, _, _ := s.store.List(nil)
	return gws
}

func (s storeSource) Probe(name string) (health.Result, bool) { return s.prober.Get(name) }

// FromStore reads the gateways from store and their probes from prober.
func FromStore(store *gateways.Store, prober *health.Prober) Source {
	return storeSource{store: store, prober: prober}
}

// Metrics is the per-cluster series: a collector read at scrape time.
type Metrics struct {
	metrics.BaseStableCollector
	max int
	src Source

	reachable, expiry, lastSuccess, omitted *metrics.Desc
}

// New returns the collector of cfg over src, or nil when cfg asks for no
// per-cluster series.
func New(cfg Config, src Source) *Metrics {
	if cfg.MaxClusters <= 0 {
		return nil
	}
	cluster := []string{LabelCluster}
	return &Metrics{
		max: cfg.MaxClusters, src: src,
		reachable: metrics.NewDesc("cluster_gateway_cluster_reachable",
			"1 when the cluster's Reachable condition is True, 0 when False, as this gateway replica's prober sees it; absent while Unknown (not probed yet since the gateway was created or changed, or the gateway not Ready). Only for the first --per-cluster-metrics-max-clusters clusters by name.",
			cluster, nil, metrics.ALPHA, ""),
		expiry: metrics.NewDesc("cluster_gateway_cluster_credential_expiry_timestamp_seconds",
			"When the cluster's credential expires (status.credential.expirationTime: a certificate's notAfter, a JWT's exp, an ExecCredential's expirationTimestamp), in seconds since the epoch; absent when the gateway is not Ready or its credential has no known expiry. Only for the first --per-cluster-metrics-max-clusters clusters by name.",
			cluster, nil, metrics.ALPHA, ""),
		lastSuccess: metrics.NewDesc("cluster_gateway_cluster_last_successful_probe_timestamp_seconds",
			"When the cluster last answered this replica's probe of /readyz with 200, in seconds since the epoch; absent until it first did. time() minus it is the time since the last successful probe. Only for the first --per-cluster-metrics-max-clusters clusters by name.",
			cluster, nil, metrics.ALPHA, ""),
		omitted: metrics.NewDesc("cluster_gateway_cluster_series_omitted_clusters",
			"Clusters with no per-cluster series because there are more than --per-cluster-metrics-max-clusters (the first by name have them); 0 when every cluster has them.",
			nil, nil, metrics.ALPHA, ""),
	}
}

// Register adds the collector to r; a nil collector registers nothing.
func (c *Metrics) Register(r metrics.KubeRegistry) {
	if c != nil {
		r.CustomMustRegister(c)
	}
}

func (c *Metrics) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- c.reachable
	ch <- c.expiry
	ch <- c.lastSuccess
	ch <- c.omitted
}

func (c *Metrics) CollectWithStability(ch chan<- metrics.Metric) {
	gws := c.src.Gateways()
	covered := firstByName(gws, c.max)
	ch <- metrics.NewLazyConstMetric(c.omitted, metrics.GaugeValue, float64(len(gws)-len(covered)))
	for _, g := range covered {
		name := g.Name()
		if r, ok := c.src.Probe(name); ok {
			switch r.Status {
			case metav1.ConditionTrue:
				ch <- metrics.NewLazyConstMetric(c.reachable, metrics.GaugeValue, 1, name)
			case metav1.ConditionFalse:
				ch <- metrics.NewLazyConstMetric(c.reachable, metrics.GaugeValue, 0, name)
			}
			if !r.LastSuccessTime.IsZero() {
				ch <- metrics.NewLazyConstMetric(c.lastSuccess, metrics.GaugeValue, float64(r.LastSuccessTime.UnixMilli())/1e3, name)
			}
		}
		if cred := g.Object.Status.Credential; g.Ready && cred != nil && cred.ExpirationTime != nil {
			ch <- metrics.NewLazyConstMetric(c.expiry, metrics.GaugeValue, float64(cred.ExpirationTime.Unix()), name)
		}
	}
}

// firstByName returns the n gateways of gws first by name (all of them when
// there are no more than n), in name order. gws is not changed. A partial
// selection would do with n much smaller than len(gws), but a sort of names
// per scrape costs little next to the series written for them.
func firstByName(gws []*gateways.Gateway, n int) []*gateways.Gateway {
	out := slices.Clone(gws)
	slices.SortFunc(out, func(a, b *gateways.Gateway) int { return strings.Compare(a.Name(), b.Name()) })
	return out[:min(n, len(out))]
}
