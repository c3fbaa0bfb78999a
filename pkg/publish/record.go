package publish

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// What the publisher owns is recorded where only the gateway and its
// administrators write: a Secret of its own type in the gateways'
// namespace. Nothing in a ClusterProfile (labels, spec.clusterManager,
// ownerReferences, an entry named like the gateway's) is trusted: whoever
// may edit ClusterProfiles may write all of it. A record names a profile by
// UID, which no one chooses, so a profile deleted and made again by another
// writer is not the one recorded.
const (
	RecordSecretName = "cluster-gateway-published-profiles"
	RecordSecretType = corev1.SecretType("gateway.clustergateway.io/published-profiles")
	recordKey        = "records"
)

// Record is what the publisher wrote for one gateway: the profile, and
// whether it created (owns) it or only wrote its entry into it.
type Record struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	Owned     bool      `json:"owned,omitempty"`
}

// records is the record Secret, mirrored in memory by the leader.
type records struct {
	client    kubernetes.Interface
	namespace string

	mu     sync.RWMutex
	loaded bool
	rv     string
	byGW   map[string]Record // by gateway name
}

// load reads the Secret (none yet: no records). A Secret of that name
// that is not the publisher's (another type) is an error the operator
// must resolve.
func (r *records) load(ctx context.Context) error {
	s, err := r.client.CoreV1().Secrets(r.namespace).Get(ctx, RecordSecretName, metav1.GetOptions{})
	m := map[string]Record{}
	rv := ""
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	default:
		if s.Type != RecordSecretType {
			return fmt.Errorf("the Secret %s/%s, where the publisher records the ClusterProfiles it owns, has type %q, not %q: it was not made by the publisher; delete it (or the ClusterGateway of that name)", r.namespace, RecordSecretName, s.Type, RecordSecretType)
		}
		if raw := s.Data[recordKey]; len(raw) > 0 {
			if err := json.Unmarshal(raw, &m); err != nil {
				return fmt.Errorf("the publisher's records in Secret %s/%s cannot be read (%v): delete the Secret; profiles it recorded are then no longer the publisher's", r.namespace, RecordSecretName, err)
			}
		}
		rv = s.ResourceVersion
	}
	r.mu.Lock()
	r.byGW, r.rv, r.loaded = m, rv, true
	r.mu.Unlock()
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
	for _, rec := range r.byGW {
		if rec.Owned && rec.Namespace == namespace && rec.Name == name && rec.UID == uid {
			return true
		}
	}
	return false
}

// set records rec for gw (nil: removes it) in the Secret, with its
// resourceVersion as precondition: a write by anything else fails, is
// reloaded and tried again by the caller.
func (r *records) set(ctx context.Context, gw string, rec *Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := maps.Clone(r.byGW)
	if rec == nil {
		if _, ok := m[gw]; !ok {
			return nil
		}
		delete(m, gw)
	} else {
		m[gw] = *rec
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	secrets := r.client.CoreV1().Secrets(r.namespace)
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: RecordSecretName, Namespace: r.namespace, ResourceVersion: r.rv},
		Type:       RecordSecretType,
		Data:       map[string][]byte{recordKey: raw},
	}
	var out *corev1.Secret
	if r.rv == "" {
		out, err = secrets.Create(ctx, s, metav1.CreateOptions{})
	} else {
		out, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
	}
	if err != nil {
		r.loaded = false // reload before the next use
		return fmt.Errorf("recording in Secret %s/%s: %w", r.namespace, RecordSecretName, err)
	}
	r.byGW, r.rv = m, out.ResourceVersion
	return nil
}
