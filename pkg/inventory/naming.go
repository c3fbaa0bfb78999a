// Package inventory keeps ClusterGateways in sync with the clusters an
// inventory knows: Cluster API kubeconfig Secrets and ClusterProfiles
// (sigs.k8s.io/cluster-inventory-api). One gateway replica syncs at a time,
// elected with a Lease; it creates, updates and deletes only the gateways whose
// owner record, which only it writes, names the object they are synced from.
package inventory

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/clustergateway/cluster-gateway/pkg/gateways"
)

// Source is an inventory the gateways are synced from.
type Source string

const (
	// SourceCAPI: Cluster API's <cluster>-kubeconfig Secrets.
	SourceCAPI Source = "capi"
	// SourceClusterProfile: multicluster.x-k8s.io/v1alpha1 ClusterProfiles.
	SourceClusterProfile Source = "clusterprofile"
)

// What shows, in a synced gateway's own labels and annotations, where it is
// synced from. They are for people and selectors: the sync decides what it
// owns from its owner record alone (gateways.Owner), which no API write can
// set, and API writes may not add, change or remove these keys either
// (gateways.SyncedKeyPrefix).
const (
	LabelSyncedFrom      = gateways.SyncedKeyPrefix + "from"       // capi | clusterprofile
	AnnotationSource     = gateways.SyncedKeyPrefix + "source"     // <namespace>/<name> of the Secret or ClusterProfile
	AnnotationSourceUID  = gateways.SyncedKeyPrefix + "source-uid" // its UID
	maxGatewayNameLength = 253                                     // a Secret's name
)

// GatewayName is the gateway synced from the object namespace/name: the
// two joined by "-"; when that is longer than a Secret's name may be, its
// start and a hash of both. Different objects may map to one name ("a-b"/"c"
// and "a"/"b-c"): the first gateway stays and the other is reported as a
// collision, never overwritten.
func GatewayName(namespace, name string) string {
	n := namespace + "-" + name
	if len(n) <= maxGatewayNameLength {
		return n
	}
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	suffix := "-" + hex.EncodeToString(sum[:])[:16]
	return strings.TrimRight(n[:maxGatewayNameLength-len(suffix)], "-.") + suffix
}
