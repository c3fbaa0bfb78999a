package options

import (
	"github.com/spf13/pflag"

	"github.com/clustergateway/cluster-gateway/pkg/inventory"
)

// addInventoryFlags adds the inventory sync's flags, which fill o
// (pkg/inventory's plain config).
func addInventoryFlags(o *inventory.Config, fs *pflag.FlagSet) {
	fs.StringSliceVar(&o.Sources, "inventory-sync", o.Sources, "Inventories to keep ClusterGateways in sync with: capi (Cluster API kubeconfig Secrets) and clusterprofile (multicluster.x-k8s.io ClusterProfiles), read in --secret-namespace and --credential-source-namespaces. One replica syncs at a time (a Lease in --secret-namespace). Empty: off.")
	fs.StringSliceVar(&o.Providers, "inventory-sync-providers", o.Providers, "Credential providers that a ClusterProfile's status.accessProviders may name for --inventory-sync=clusterprofile; the first one a profile names is used. Default: every provider of --credential-providers-file; set it to allow only some of them (each must be in that file).")
	fs.DurationVar(&o.LeaseDuration, "inventory-sync-lease-duration", o.LeaseDuration, "How long the syncing replica's Lease lasts unrenewed: another replica takes over this long after the leader died.")
	fs.DurationVar(&o.RenewDeadline, "inventory-sync-renew-deadline", o.RenewDeadline, "How long the syncing replica tries to renew its Lease before it stops syncing.")
	fs.DurationVar(&o.RetryPeriod, "inventory-sync-retry-period", o.RetryPeriod, "How often replicas try to take or renew the Lease.")
}
