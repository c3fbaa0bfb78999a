package options

import (
	"github.com/spf13/pflag"

	"github.com/clustergateway/cluster-gateway/pkg/publish"
)

// addPublishFlags adds the ClusterProfile publisher's flags (pkg/publish
// takes the plain Options).
func addPublishFlags(o *publish.Config, fs *pflag.FlagSet) {
	fs.BoolVar(&o.Enabled, "publish-clusterprofiles", o.Enabled, "Publish ClusterGateways as a SIG-Multicluster ClusterProfile access provider: a gateway synced from a ClusterProfile gets its entry in that profile's status.accessProviders; any other published gateway gets a ClusterProfile of its name in --publish-namespace, owned by the gateway. One replica writes (the inventory sync's Lease). Needs --publish-namespace and --publish-hub-server.")
	fs.StringVar(&o.Selector, "publish-gateway-selector", o.Selector, "Label selector over ClusterGateways: only those it matches are published. Empty: all.")
	fs.StringVar(&o.Namespace, "publish-namespace", o.Namespace, "Namespace of the ClusterProfiles the publisher creates for published gateways not synced from a ClusterProfile.")
	fs.StringVar(&o.ProviderName, "publish-provider-name", o.ProviderName, "Name of the gateway's entry in status.accessProviders: the provider name consumers list in their provider file. The inventory sync never makes a gateway from an entry of this name.")
	fs.StringVar(&o.HubServer, "publish-hub-server", o.HubServer, "The hub's https URL as consumers reach it; an entry's server is <this>/apis/gateway.clustergateway.io/v1alpha1/clustergateways/<name>/proxy.")
	fs.StringVar(&o.HubCAFile, "publish-hub-ca-file", o.HubCAFile, "PEM CA bundle consumers verify the hub with, published as certificate-authority-data (certificates only: a file with anything else is refused). Re-read every --publish-hub-ca-reload-interval: a changed CA is published into every entry; a changed file that is not valid keeps the last good CA (logged, and counted in cluster_gateway_publish_hub_ca_file_reloads_total{result=\"failure\"}). Empty: none.")
	fs.DurationVar(&o.HubCAReloadInterval, "publish-hub-ca-reload-interval", o.HubCAReloadInterval, "How often the gateway reads --publish-hub-ca-file for changes; 0 never (read at start only).")
}
