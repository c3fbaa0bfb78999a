package options

import (
	"github.com/spf13/pflag"

	"github.com/clustergateway/cluster-gateway/pkg/pool/konnectivity"
)

// addKonnectivityFlags adds the konnectivity flags, which fill o
// (pkg/pool/konnectivity's plain config).
func addKonnectivityFlags(o *konnectivity.Config, fs *pflag.FlagSet) {
	fs.StringSliceVar(&o.Addresses, "konnectivity-server-address", o.Addresses, "host:port of a konnectivity proxy-server (gRPC mode) that Konnectivity endpoints are dialed through; repeat it or separate with commas for several proxy-servers (the gateway keeps a tunnel to each and dials through the healthy ones; agents must connect to every one).")
	fs.StringVar(&o.CAFile, "konnectivity-ca-file", o.CAFile, "CA that signs the proxy-server's serving certificate. Reloaded on change.")
	fs.StringVar(&o.CertFile, "konnectivity-cert-file", o.CertFile, "Client certificate for the proxy-server. Reloaded on change.")
	fs.StringVar(&o.KeyFile, "konnectivity-key-file", o.KeyFile, "Client key for the proxy-server. Reloaded on change.")
	fs.DurationVar(&o.ReloadInterval, "konnectivity-reload-interval", o.ReloadInterval, "How often the konnectivity CA, certificate and key files are re-read (all three at once, compared by content).")
	fs.DurationVar(&o.HealthInterval, "konnectivity-health-interval", o.HealthInterval, "How often the gateway checks that each proxy-server answers on its tunnel.")
	fs.DurationVar(&o.HealthTimeout, "konnectivity-health-timeout", o.HealthTimeout, "How long a proxy-server may take to answer a health check; a tunnel whose check is not answered in time takes no new dials (they go to the other proxy-servers) until one is.")
	fs.IntVar(&o.HealthFailureThreshold, "konnectivity-health-failure-threshold", o.HealthFailureThreshold, "How many health checks in a row a proxy-server may leave unanswered before its tunnel is closed (its streams end) and rebuilt.")
}
