package publish

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// What the publisher did for a gateway is recorded where only the gateway
// and its administrators write: one small Secret per published gateway, in
// the gateways' namespace, of the publisher's own Secret type and carrying
// its label. Nothing in a ClusterProfile (labels, spec.clusterManager,
// ownerReferences, an entry named like the gateway's) is trusted: whoever
// may edit ClusterProfiles may write all of it. A record names a profile by
// UID, which no one chooses, so a profile deleted and made again by another
// writer is not the one recorded.
//
// Why not in one Secret: a Secret holds at most 1 MiB, some 8,000 records,
// and a ClusterGateway of its fixed name, made first, stopped the publisher.
// Why not in the gateway's own Secret: the record must outlive the gateway,
// whose owned profile is deleted after the gateway is gone, also by a
// replica that did not see the deletion (a finalizer on the gateway's Secret
// would hold it, but a ClusterGateway writer may remove finalizers, and a
// ClusterProfile's ownerReference cannot name an aggregated ClusterGateway).
//
// A ClusterGateway writer cannot forge or disturb a record: the API writes
// Secrets of type Opaque whose only Secret label is the gateway label, and a
// Secret's type never changes; a record's name is random (never one a
// gateway could take first; a gateway created under a record's name is
// refused as AlreadyExists, and the record is found by label and type, not
// by name).
const (
	RecordSecretType = corev1.SecretType("gateway.clustergateway.io/published-profile")
	// LabelRecord marks the publisher's record Secrets, so that they are
	// listed without reading every Secret of the namespace.
	LabelRecord        = v1alpha1.GroupName + "/published-profile"
	recordNamePrefix   = "cluster-gateway-published-"
	recordKeyGateway   = "gateway"
	recordKeyPublished = "published-profile"
)

// Record is what the publisher wrote for one gateway: the profile, and
// whether it created (owns) it or only wrote its entry into it.
type Record struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	Owned     bool      `json:"owned,omitempty"`
}

// recordSecret is where a gateway's record is stored.
type recordSecret struct {
	name, rv string
	extra    []string // more record Secrets of the gateway (two leaders raced): deleted on its next write
}

// records are the record Secrets, mirrored in memory by the leader.
type records struct {
	client    kubernetes.Interface
	namespace string

	mu      sync.RWMutex
	loaded  bool
	byGW    map[string]Record // by gateway name
	secrets map[string]recordSecret
	owned   map[string]types.UID // the owned records' profiles by <namespace>/<name>: the sync asks per profile
}

// load lists the record Secrets. One that cannot be read is skipped with
// a log line naming it (the operator deletes it; its profile is then no
// longer the publisher's): one bad record never stops the others.
func (r *records) load(ctx context.Context) error {
	byGW, secrets := map[string]Record{}, map[string]recordSecret{}
	var bad []string
	opts := metav1.ListOptions{LabelSelector: LabelRecord + "=true", Limit: 500}
	for {
		list, err := r.client.CoreV1().Secrets(r.namespace).List(ctx, opts)
		if err != nil {
			return fmt.Errorf("listing the publisher's record Secrets in %s: %w", r.namespace, err)
		}
		for i := range list.Items {
			s := &list.Items[i]
			if s.Type != RecordSecretType {
				continue // labelled by a Secret writer, not made by the publisher
			}
			gw := string(s.Data[recordKeyGateway])
			var rec Record
			if err := json.Unmarshal(s.Data[recordKeyPublished], &rec); err != nil || gw == "" || rec.Name == "" {
				bad = append(bad, s.Name)
				continue
			}
			if cur, ok := secrets[gw]; ok {
				// Keep an owned record over an entry's: a profile the
				// publisher created stays its own until it is deleted.
				if rec.Owned && !byGW[gw].Owned {
					cur.extra = append(cur.extra, cur.name)
					byGW[gw], secrets[gw] = rec, recordSecret{name: s.Name, rv: s.ResourceVersion, extra: cur.extra}
				} else {
					cur.extra = append(cur.extra, s.Name)
					secrets[gw] = cur
				}
				continue
			}
			byGW[gw], secrets[gw] = rec, recordSecret{name: s.Name, rv: s.ResourceVersion}
		}
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	r.mu.Lock()
	r.byGW, r.secrets, r.loaded = byGW, secrets, true
	r.reindex()
	r.mu.Unlock()
	if len(bad) > 0 {
		slices.Sort(bad)
		klog.ErrorS(nil, "ClusterProfile publisher: record Secrets cannot be read and are ignored; delete them (the profiles they recorded are then no longer the publisher's)", "namespace", r.namespace, "secrets", bad)
	}
	return nil
}

func (r *records) isLoaded() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.loaded
}

func (r *records) get(gw string) (Record, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	rec, ok := r.byGW[gw]
	return rec, ok
}

func (r *records) gateways() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return sortedKeys(r.byGW)
}

// owns tells whether the publisher created the profile namespace/name of
// this UID. Until the records are loaded it owns nothing.
func (r *records) owns(namespace, name string, uid types.UID) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.owned == nil { // records not loaded but made by hand (tests)
		for _, rec := range r.byGW {
			if rec.Owned && rec.Namespace == namespace && rec.Name == name && rec.UID == uid {
				return true
			}
		}
		return false
	}
	u, ok := r.owned[namespace+"/"+name]
	return ok && u == uid
}

// unindex drops gw's owned record from owned; the caller holds the write lock.
func (r *records) unindex(gw string) {
	if old, ok := r.byGW[gw]; ok && old.Owned && r.owned != nil && r.owned[old.Namespace+"/"+old.Name] == old.UID {
		delete(r.owned, old.Namespace+"/"+old.Name)
	}
}

// reindex rebuilds owned from byGW; the caller holds the write lock.
func (r *records) reindex() {
	r.owned = map[string]types.UID{}
	for _, rec := range r.byGW {
		if rec.Owned {
			r.owned[rec.Namespace+"/"+rec.Name] = rec.UID
		}
	}
}

// set records rec for gw (nil: removes it) in gw's record Secret, with its
// resourceVersion as precondition: a write by anything else fails, is
// reloaded and tried again by the caller.
func (r *records) set(ctx context.Context, gw string, rec *Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	secrets := r.client.CoreV1().Secrets(r.namespace)
	cur, has := r.secrets[gw]
	fail := func(what string, err error) error {
		r.loaded = false // reload before the next use
		return fmt.Errorf("%s the publisher's record of gateway %s (a Secret in %s): %w", what, gw, r.namespace, err)
	}
	for _, n := range cur.extra {
		if err := secrets.Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fail("deleting a duplicate of", err)
		}
	}
	cur.extra = nil
	if rec == nil {
		if has {
			err := secrets.Delete(ctx, cur.name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &cur.rv}})
			if err != nil && !apierrors.IsNotFound(err) {
				return fail("deleting", err)
			}
		}
		r.unindex(gw)
		delete(r.byGW, gw)
		delete(r.secrets, gw)
		return nil
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.namespace, Labels: map[string]string{LabelRecord: "true"}},
		Type:       RecordSecretType,
		Data:       map[string][]byte{recordKeyGateway: []byte(gw), recordKeyPublished: raw},
	}
	var out *corev1.Secret
	if has {
		s.Name, s.ResourceVersion = cur.name, cur.rv
		if out, err = secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			return fail("updating", err)
		}
	} else {
		// A random name, not generateName, so that a name taken by chance
		// (or by a gateway) is tried again here, not reported as a failure.
		for range 3 {
			if s.Name, err = recordName(); err != nil {
				return err
			}
			if out, err = secrets.Create(ctx, s, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
				break
			}
		}
		if err != nil {
			return fail("creating", err)
		}
	}
	if r.byGW == nil {
		r.byGW, r.secrets = map[string]Record{}, map[string]recordSecret{}
	}
	if r.owned == nil {
		r.reindex()
	}
	r.unindex(gw)
	r.byGW[gw], r.secrets[gw] = *rec, recordSecret{name: out.Name, rv: out.ResourceVersion}
	if rec.Owned {
		r.owned[rec.Namespace+"/"+rec.Name] = rec.UID
	}
	return nil
}

// recordName is a new record Secret's name (a variable for the test that
// makes it collide with a gateway's).
var recordName = func() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return recordNamePrefix + hex.EncodeToString(b), nil
}
