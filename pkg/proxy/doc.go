// Package proxy is the request path of the clustergateways/{name}/proxy
// subresource: it looks the gateway up in the informer cache, takes a pooled
// transport for it, sets the identity the managed cluster should see (in
// one round tripper, last before the wire), and streams the request there
// with k8s.io/apimachinery's UpgradeAwareHandler (ordinary requests over
// HTTP/2, exec/attach/port-forward over HTTP/1.1). It builds and holds the
// prober (pkg/health), which probes each cluster through that same path.
package proxy
