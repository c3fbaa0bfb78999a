// Package fanout serves a set of clusters through one endpoint: the proxy
// subresource of clustersets (…/clustersets/<selection>/proxy/<inner path>)
// lists and watches across every cluster of the set that the caller may use,
// streamed, without a cache. Each cluster is read through the single-cluster
// proxy path (proxy.Serve, in-process), so identity, header hygiene, endpoint
// policy, per-cluster fairness and the proxy's metrics are those of a
// single-cluster request. docs/api.md describes the API.
package fanout
