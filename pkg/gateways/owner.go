package gateways

import (
	"context"
	"encoding/json"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// Which gateways the inventory sync (pkg/inventory) owns is recorded where
// only the sync writes: under KeyOwner in the gateway's Secret, a data key
// the ClusterGateway does not model. API reads never show it; API writes
// can neither set it (a create starts from an empty Secret) nor change or
// remove it (an update keeps the Secret's keys it does not model). Only
// CreateOwned and UpdateOwned write it, and only the sync calls them. So
// whoever may write ClusterGateways cannot hand a gateway to the sync, whose
// power (sending the credential Secrets of its source namespaces, deleting
// gateways) is more than hers; only who may write the Secrets of the
// gateways' namespace (the gateway's administrators) can.
const KeyOwner = "synced-owner"

// SyncedKeyPrefix starts the labels and annotations that show which
// inventory object a gateway is synced from. The sync writes them for people
// to read; they decide nothing, and API writes may not add, change or remove
// them (pkg/registry), so they cannot say what the owner record does not.
const SyncedKeyPrefix = v1alpha1.GroupName + "/synced-"

// IsSyncedKey tells whether a label or annotation key is the sync's.
func IsSyncedKey(key string) bool { return strings.HasPrefix(key, SyncedKeyPrefix) }

// Owner is the sync's record that it made a gateway for one inventory
// object, as that object was when it did: its UID tells a deleted and
// recreated object from the one the gateway was made for.
type Owner struct {
	Source string    `json:"source"` // the inventory: capi, clusterprofile
	Object string    `json:"object"` // the object's <namespace>/<name>
	UID    types.UID `json:"uid"`
}

// readOwner is the owner record of a gateway's Secret data; nil when there
// is none or it cannot be read (then no one owns the gateway).
func readOwner(d map[string][]byte) *Owner {
	raw, ok := d[KeyOwner]
	if !ok {
		return nil
	}
	var o Owner
	if err := json.Unmarshal(raw, &o); err != nil || o.Source == "" || o.Object == "" {
		return nil
	}
	return &o
}

// Owner is the inventory sync's record on the gateway, if it has one.
func (g *Gateway) Owner() (Owner, bool) {
	if g.owner == nil {
		return Owner{}, false
	}
	return *g.owner, true
}

// CreateOwned is Create for the inventory sync: the new gateway's Secret
// records owner.
func (s *Store) CreateOwned(ctx context.Context, gw *v1alpha1.ClusterGateway, owner Owner) (*Gateway, error) {
	return s.create(ctx, gw, &owner, nil)
}

// UpdateOwned is Update for the inventory sync: the gateway's Secret records
// owner from now on.
func (s *Store) UpdateOwned(ctx context.Context, gw *v1alpha1.ClusterGateway, existing *Current, owner Owner) (*Gateway, error) {
	return s.update(ctx, gw, existing, &owner, nil)
}

// setOwner records owner in a Secret's data; nil leaves the data as it is.
func setOwner(d map[string][]byte, owner *Owner) error {
	if owner == nil {
		return nil
	}
	raw, err := json.Marshal(owner)
	if err != nil {
		return err
	}
	d[KeyOwner] = raw
	return nil
}
