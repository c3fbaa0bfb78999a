// Package gateways is the store of ClusterGateways: their Secret format, the
// informer that reads them, the parsed gateway (one immutable value per
// resourceVersion) and the writes that change them. The API (pkg/registry)
// and the proxy (pkg/proxy) both sit on it, side by side.
package gateways

import (
	"bytes"
	"fmt"
	"net/url"
	"slices"
	"sync/atomic"
	"time"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// Gateway is a ClusterGateway as read from its Secret at one resourceVersion,
// parsed once. It is immutable: a new resourceVersion is a new Gateway.
type Gateway struct {
	// Object holds the gateway including its credential material: never
	// return it to a client (Public is the redacted form).
	Object *v1alpha1.ClusterGateway
	// Ready is false when the stored data cannot be used; Problem says why.
	Ready   bool
	phase   int8 // of the validity, when parsed (beside Ready: no padding of its own)
	Problem string
	// Address and ProxyURL are parsed when Ready, and so are
	// AdditionalAddresses (spec.endpoint.additionalAddresses, in order).
	Address             *url.URL
	AdditionalAddresses []*url.URL
	ProxyURL            *url.URL
	// Conn is the endpoint and credential as the gateway sends them: the
	// spec's, completed from the credential's source. It points into res,
	// which keeps them once (a second copy was 192 bytes per gateway).
	Conn *Conn

	stored
	res Resolution

	// The certificate's validity: Ready can change when the clock crosses
	// one of these, without a write (see at).
	validity validity
	// The gateway as of the other phases (see at), each made once. An
	// array behind one pointer, not a sync.Map (48 bytes per gateway, and
	// rarely used).
	later atomic.Pointer[[3]atomic.Pointer[Gateway]]
}

// stored is what a gateway keeps of its Secret besides the ClusterGateway,
// the same for every phase and resolution of one resourceVersion.
type stored struct {
	// Not the Secret it was read from: with 10,000 gateways its metadata and
	// data map were a quarter of the cache's memory. Writes start from the
	// Secret as the hub has it now (Store.GetCurrent); the cache's key is
	// the Secret's namespace and name (GetObjectMeta). The namespace, and the
	// Object's labels and annotations, are shared with the gateways that have
	// equal ones.
	*shared
	// Keeps the Object's CA bundle shared with the gateways that have the
	// same (see shareBytes).
	ca unique.Handle[string]

	// What the status is computed from (see at): the problems the Secret
	// itself shows and when it was last written.
	problems []string
	written  metav1.Time

	// The inventory sync's record that the gateway is its own (nil: none).
	owner *Owner
}

// Name is the gateway's name.
func (g *Gateway) Name() string { return g.Object.Name }

// Public is the gateway as clients may see it: without material. It is a
// new copy the caller owns. It is not cached: every reader copies it anyway,
// and a cached copy per gateway would double what the cache holds.
func (g *Gateway) Public() *v1alpha1.ClusterGateway {
	return redact(g.Object)
}

// Parse reads a gateway from its Secret. It never fails: a Secret that cannot
// be used is a gateway with Ready=False saying why.
func Parse(s *corev1.Secret) *Gateway {
	return parseAt(s, time.Now())
}

func parseAt(s *corev1.Secret, now time.Time) *Gateway {
	obj, problems := fromSecret(s)
	st := stored{shared: shareMeta(s.Namespace, obj.Labels, obj.Annotations), problems: problems, written: lastWrite(s), owner: readOwner(s.Data)}
	obj.Labels, obj.Annotations = st.labels, st.annotations
	obj.Spec.Endpoint.CABundle, st.ca = shareBytes(obj.Spec.Endpoint.CABundle)
	return withStatus(st, obj, inline(obj), now)
}

// Conn is where a gateway's requests go and the credential they carry.
type Conn struct {
	Endpoint  v1alpha1.Endpoint
	Token     string
	Cert, Key []byte
}

// withStatus completes obj, which it owns, with its status as of now.
func withStatus(st stored, obj *v1alpha1.ClusterGateway, res Resolution, now time.Time) *Gateway {
	var v validity
	obj.Status, v = computeStatus(obj, st.problems, st.written, res, now)
	g := &Gateway{Object: obj, stored: st, res: res, validity: v, phase: int8(v.phase(now))}
	g.Conn = &g.res.Conn
	for _, cond := range obj.Status.Conditions {
		if cond.Type == v1alpha1.ConditionReady {
			g.Ready = cond.Status == metav1.ConditionTrue
			if !g.Ready {
				g.Problem = cond.Message
			}
		}
	}
	if g.Ready {
		var err error
		if g.Address, err = v1alpha1.ParseAddress(g.Conn.Endpoint.Address); err != nil {
			g.Ready, g.Problem = false, fmt.Sprintf("spec.endpoint.address %v", err)
		}
		for i, a := range g.Conn.Endpoint.AdditionalAddresses {
			u, err := v1alpha1.ParseAddress(a)
			if err != nil {
				g.Ready, g.Problem = false, fmt.Sprintf("spec.endpoint.additionalAddresses[%d] %v", i, err)
				break
			}
			g.AdditionalAddresses = append(g.AdditionalAddresses, u)
		}
		if obj.Spec.Endpoint.ProxyURL != "" {
			if g.ProxyURL, err = v1alpha1.ParseProxyURL(obj.Spec.Endpoint.ProxyURL); err != nil {
				g.Ready, g.Problem = false, fmt.Sprintf("spec.endpoint.proxyURL %v", err)
			}
		}
	}
	return g
}

// validity is when a client certificate is valid (zero: no certificate).
type validity struct{ notBefore, notAfter time.Time }

// phase is where now lies in it: 0 before, 1 within, 2 after.
func (v validity) phase(now time.Time) int {
	switch {
	case v.notAfter.IsZero():
		return 1
	case now.Before(v.notBefore):
		return 0
	case now.After(v.notAfter):
		return 2
	}
	return 1
}

// at is the gateway as of now: itself, unless the clock has since crossed
// its certificate's notBefore or notAfter, which changes Ready without a
// write. Each phase is computed once.
func (g *Gateway) at(now time.Time) *Gateway {
	p := g.validity.phase(now)
	if p == int(g.phase) {
		return g
	}
	later := g.later.Load()
	if later == nil {
		g.later.CompareAndSwap(nil, new([3]atomic.Pointer[Gateway]))
		later = g.later.Load()
	}
	if v := later[p].Load(); v != nil {
		return v
	}
	obj := *g.Object // the same gateway but for its status: shares what it does not change
	later[p].CompareAndSwap(nil, withStatus(g.stored, &obj, g.res, now))
	return later[p].Load()
}

// GetObjectMeta is the metadata of the gateway's Secret as the informer
// uses it: its cache key (namespace/name) and the resourceVersion it
// compares on a relist. It is built per call: the informer calls it per
// event, not per read.
func (g *Gateway) GetObjectMeta() metav1.Object {
	o := g.Object
	return &metav1.ObjectMeta{Namespace: g.namespace, Name: o.Name, UID: o.UID, ResourceVersion: o.ResourceVersion}
}

// SameTransport tells whether two versions of a gateway reach their cluster
// the same way: endpoint, TLS and client certificate, as sent (a bearer
// token is not part of it: it is sent per request).
func SameTransport(a, b *Gateway) bool {
	ea, eb := a.Conn.Endpoint, b.Conn.Endpoint
	return ea.Type == eb.Type && ea.Address == eb.Address && slices.Equal(ea.AdditionalAddresses, eb.AdditionalAddresses) && bytes.Equal(ea.CABundle, eb.CABundle) &&
		ea.ServerName == eb.ServerName && ea.InsecureSkipTLSVerify == eb.InsecureSkipTLSVerify &&
		ea.ProxyURL == eb.ProxyURL && bytes.Equal(a.Conn.Cert, b.Conn.Cert) && bytes.Equal(a.Conn.Key, b.Conn.Key)
}
