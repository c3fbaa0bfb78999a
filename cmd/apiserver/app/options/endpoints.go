package options

import (
	"github.com/spf13/pflag"

	"github.com/clustergateway/cluster-gateway/pkg/endpointpolicy"
)

// addEndpointFlags adds --endpoint-allow-cidrs and --endpoint-deny-cidrs,
// which fill o (pkg/endpointpolicy's plain config).
func addEndpointFlags(o *endpointpolicy.Config, fs *pflag.FlagSet) {
	fs.StringSliceVar(&o.AllowCIDRs, "endpoint-allow-cidrs", o.AllowCIDRs,
		"If set, the gateway connects to managed clusters and forward proxies only at addresses in these CIDRs (checked after DNS resolution); --endpoint-deny-cidrs still applies.")
	fs.StringSliceVar(&o.DenyCIDRs, "endpoint-deny-cidrs", o.DenyCIDRs,
		"The gateway never connects to managed clusters or forward proxies at addresses in these CIDRs (checked after DNS resolution). Pass an empty value to deny nothing; in production consider adding 127.0.0.0/8,::1/128 and the pod and service CIDRs of the hub.")
}
