// Package proxy is the request path of the clustergateways/{name}/proxy
// subresource, in two halves. Serve is the hub side: it parses the inner
// request, authorizes the caller, audits the request, reads the gateway
// through its record (pkg/clusters) and takes a slot of the cluster's fair
// share (pkg/fairness). It ends in one call to the cluster side, toCluster
// (cluster.go), which answers the request: it leases the pooled transport
// through the record, sets the identity the managed cluster should see (in
// one round tripper, last before the wire), and streams the request there,
// through one shared httputil.ReverseProxy (ordinary requests over HTTP/2)
// or k8s.io/apimachinery's UpgradeAwareHandler (exec, attach, port-forward
// over HTTP/1.1). The prober (pkg/health), which the assembler builds,
// probes each cluster through the same transport (ProbeCluster); the proxy
// reads what it knows (Health).
package proxy
