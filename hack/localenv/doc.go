// Package localenv brings up a complete local environment on 127.0.0.0/8: one
// etcd, a hub kube-apiserver with the aggregation layer, N managed
// kube-apiservers each with an in-process fake kubelet, and the cluster-gateway
// installed into the hub from config/; unless NoKonnectivity is set, also
// konnectivity proxy-servers (two by default) and an agent connected to each
// through a balancer in this process, with one more managed kube-apiserver
// that the gateway reaches only through them; and, in this process, an HTTP
// CONNECT and a SOCKS5 forward proxy for gateways with a proxyURL (Env.HTTPProxy,
// Env.SOCKS5Proxy). `make demo` (hack/local-env) and the
// end-to-end tests (test/e2e) both use it, so there is one implementation.
//
// Every process is started by this package and stopped by its pid; Stop stops
// everything that was started, also after a partial failure.
package localenv
