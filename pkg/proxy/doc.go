// Package proxy is the request path of the clustergateways/{name}/proxy
// subresource: it reads the gateway and leases a pooled transport through
// the cluster's record (pkg/clusters), sets the identity the managed cluster
// should see (in one round tripper, last before the wire), and streams the
// request there with k8s.io/apimachinery's UpgradeAwareHandler (ordinary
// requests over HTTP/2, exec/attach/port-forward over HTTP/1.1). The prober
// (pkg/health), which the assembler builds, probes each cluster through that
// same path (ProbeCluster); the proxy reads what it knows (Health).
package proxy
