package options

import (
	"github.com/spf13/pflag"

	"github.com/clustergateway/cluster-gateway/pkg/pool"
)

// addPoolFlags adds the pool's flags, which fill o (pkg/pool's plain
// config). --retire-grace-period and --dial-timeout also govern konnectivity
// tunnels: one meaning, one default (the assembler copies them).
func addPoolFlags(o *pool.Config, fs *pflag.FlagSet) {
	fs.IntVar(&o.Capacity, "pool-capacity", o.Capacity, "Most clusters with a pooled transport at once; the least recently used is retired beyond it.")
	fs.DurationVar(&o.IdleTTL, "pool-idle-ttl", o.IdleTTL, "A cluster's pooled transport unused this long is retired (0: never).")
	fs.IntVar(&o.MaxConnsPerCluster, "pool-max-connections-per-cluster", o.MaxConnsPerCluster, "Most HTTP/2 connections open to one cluster, to each of its API-server addresses (exec, attach and port-forward, and HTTP/1.1, are not counted); a request that needs one more fails with 503 (0: no bound). A healthy cluster needs one for every few hundred requests in flight to it; a burst of new requests opens one for each that finds the open ones full.")
	fs.DurationVar(&o.RetireGrace, "retire-grace-period", o.RetireGrace, "How long live streams (watch, exec, logs -f) on a retired transport or konnectivity tunnel may go on before they are closed (0: at once).")
	fs.DurationVar(&o.DialTimeout, "dial-timeout", o.DialTimeout, "Bound on connecting to a managed cluster (TCP, forward proxy or konnectivity tunnel, and TLS); beyond it the request fails with 503.")
	fs.DurationVar(&o.ResponseHeaderTimeout, "upstream-response-header-timeout", o.ResponseHeaderTimeout, "Bound on waiting for a managed cluster's response headers once a request is sent, for every proxied request (watches, logs -f, exec and port-forward included); beyond it the request fails with 504.")
}
