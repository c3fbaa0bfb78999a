package gateways

import (
	"context"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/credentials"
)

// sources reads the credential Secrets of the namespaces the gateway may
// read: one informer per namespace, each keeping only the keys the gateway
// reads of each Secret (Source), so a rotation is an event, never a GET on
// a request. In the gateway's own namespace the gateways' own Secrets are
// left out; everywhere, Helm's release Secrets (large, never a credential).
type sources struct {
	byNamespace map[string]cache.SharedIndexInformer
}

// Secret types that never hold a credential the gateway reads.
const helmReleaseType = "helm.sh/release.v1"

func (s *Store) newSources(namespaces []string) *sources {
	src := &sources{byNamespace: map[string]cache.SharedIndexInformer{}}
	for _, ns := range namespaces {
		if _, ok := src.byNamespace[ns]; ok {
			continue
		}
		own := ns == s.namespace
		factory := informers.NewSharedInformerFactoryWithOptions(s.client, 0, informers.WithNamespace(ns),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.FieldSelector = "type!=" + helmReleaseType
				if own {
					o.LabelSelector = "!" + LabelGateway
				}
			}))
		inf := factory.Core().V1().Secrets().Informer()
		_ = inf.SetTransform(func(obj interface{}) (interface{}, error) {
			sec, ok := obj.(*corev1.Secret)
			if !ok {
				return obj, nil // already a *Source, or a tombstone
			}
			var prev *Source
			if old, ok, _ := inf.GetIndexer().GetByKey(sec.Namespace + "/" + sec.Name); ok {
				prev, _ = old.(*Source)
			}
			n := newSource(sec, prev)
			if prev != nil && prev.digest != n.digest {
				s.metrics.Rotated(SourceKindSecret)
			}
			return n, nil
		})
		src.byNamespace[ns] = inf
	}
	return src
}

// GetObjectMeta is the Source's cache key, for the informer.
func (s *Source) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name}
}

// run runs the informers until ctx is done, and returns when they have stopped.
func (src *sources) run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, inf := range src.byNamespace {
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	wg.Wait()
}

// access is whether the gateway can read a source's namespace.
type access int

const (
	notListed access = iota // not one of the namespaces it reads
	notSynced               // listed, but its Secrets could not be listed yet (RBAC, the hub)
	readable
)

// get returns the Secret (nil when it does not exist) and whether the
// gateway can read its namespace.
func (src *sources) get(ref *v1alpha1.SecretReference) (*Source, access) {
	inf, ok := src.byNamespace[ref.Namespace]
	switch {
	case !ok:
		return nil, notListed
	case !inf.HasSynced():
		return nil, notSynced
	}
	obj, ok, _ := inf.GetIndexer().GetByKey(ref.Namespace + "/" + ref.Name)
	if !ok {
		return nil, readable
	}
	s, _ := obj.(*Source)
	return s, readable
}

// resolvedGateway is a gateway resolved against one version of its source.
type resolvedGateway struct {
	src    *Source
	access access
	prov   *credentials.State // of a Provider gateway
	gw     *Gateway
}

// resolve is g as it can be used now: a gateway whose credential is read
// from a Secret is completed from the Secret as the informer has it. The
// latest resolution is kept on g, so a request resolves only after a
// rotation.
func (s *Store) resolve(g *Gateway, now time.Time) *Gateway {
	if c := s.providerCluster(g); c != nil {
		return s.resolveProvider(g, c, now)
	}
	ref := g.Object.Spec.Credential.SecretRef
	if g.Object.Spec.Credential.Type != v1alpha1.CredentialSecretRef || ref == nil || s.sources == nil {
		return g.at(now)
	}
	src, acc := s.sources.get(ref)
	if r := g.resolved.Load(); r != nil && r.src == src && r.access == acc {
		return r.gw.at(now)
	}
	r := &resolvedGateway{src: src, access: acc, gw: resolveWith(g, src, acc, now)}
	if reason := r.gw.res.reason; reason != "" {
		s.metrics.SourceFailed(SourceKindSecret, reason)
	}
	g.resolved.Store(r)
	return r.gw.at(now)
}

// resolveWith is g completed from one version of its source.
func resolveWith(g *Gateway, src *Source, acc access, now time.Time) *Gateway {
	obj := *g.Object // the same gateway but for its status
	return withStatus(g.stored, &obj, fromSource(&obj, src, acc), now)
}

// sourceKey is the informer key of a gateway's credential Secret ("" when
// it has none): the index that finds the gateways a rotation changes.
func sourceKey(g *Gateway) string {
	if ref := g.Object.Spec.Credential.SecretRef; g.Object.Spec.Credential.Type == v1alpha1.CredentialSecretRef && ref != nil {
		return ref.Namespace + "/" + ref.Name
	}
	return ""
}

const indexBySource = "bySource"

func indexSources(obj interface{}) ([]string, error) {
	if g, ok := obj.(*Gateway); ok {
		if k := sourceKey(g); k != "" {
			return []string{k}, nil
		}
	}
	return nil, nil
}

// onSourceChange calls fn for each gateway whose credential Secret was
// added, changed or deleted, with the gateway resolved against the Secret
// before and after.
func (s *Store) onSourceChange(fn func(old, new *Gateway)) error {
	changed := func(ns, name string, before, after *Source) {
		if before == after {
			return
		}
		objs, _ := s.informer.GetIndexer().ByIndex(indexBySource, ns+"/"+name)
		now := s.clock.Now()
		for _, obj := range slices.Clip(objs) {
			g := obj.(*Gateway)
			fn(resolveWith(g, before, readable, now), s.resolve(g, now))
		}
	}
	for _, inf := range s.sources.byNamespace {
		_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj interface{}) {
				if n, ok := obj.(*Source); ok {
					changed(n.Namespace, n.Name, nil, n)
				}
			},
			UpdateFunc: func(oldObj, newObj interface{}) {
				o, ok1 := oldObj.(*Source)
				n, ok2 := newObj.(*Source)
				if ok1 && ok2 {
					changed(n.Namespace, n.Name, o, n)
				}
			},
			DeleteFunc: func(obj interface{}) {
				if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = t.Obj
				}
				if o, ok := obj.(*Source); ok {
					changed(o.Namespace, o.Name, o, nil)
				}
			},
		})
		if err != nil {
			return err
		}
	}
	return nil
}
