package multicluster

import (
	"net/url"
	"strings"

	"k8s.io/client-go/rest"
)

// The two forms of a set of clusters' name (pkg/fanout reads them): one path
// segment, so that hub RBAC can grant a set by resourceNames.
const (
	// SetLabelsPrefix starts a label selector on ClusterGateways; a path
	// segment cannot hold '/', so a prefixed key's '/' is written '~',
	// which no label key or value may hold.
	SetLabelsPrefix = "labels:"
	// SetNamesPrefix starts comma-separated ClusterGateway names.
	SetNamesPrefix = "names:"
)

// LabelsSet is the name of the set of ClusterGateways that selector (a label
// selector) matches.
func LabelsSet(selector string) string {
	return SetLabelsPrefix + strings.ReplaceAll(selector, "/", "~")
}

// NamesSet is the name of the set of the named ClusterGateways.
func NamesSet(names []string) string { return SetNamesPrefix + strings.Join(names, ",") }

// SetProxyPath is the hub path under which a set of clusters is read as one
// (list and watch; docs/api.md).
func SetProxyPath(set string) string {
	return "/apis/gateway.clustergateway.io/v1alpha1/clustersets/" + url.PathEscape(set) + "/proxy"
}

// SetConfigFor returns a copy of hub whose requests read the set of clusters
// named set.
func SetConfigFor(hub *rest.Config, set string) *rest.Config {
	cfg := rest.CopyConfig(hub)
	cfg.Host = strings.TrimSuffix(hub.Host, "/") + SetProxyPath(set)
	return cfg
}
