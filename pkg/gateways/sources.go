package gateways

import (
	"context"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
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

// Access is whether the gateway can read a source's namespace.
type Access int

const (
	NotListed Access = iota // not one of the namespaces it reads
	NotSynced               // listed, but its Secrets could not be listed yet (RBAC, the hub)
	Readable
)

// Source returns the credential Secret ref names as the cache holds it
// (nil when it does not exist) and whether the gateway can read its
// namespace.
func (s *Store) Source(ref *v1alpha1.SecretReference) (*Source, Access) {
	inf, ok := s.sources.byNamespace[ref.Namespace]
	switch {
	case !ok:
		return nil, NotListed
	case !inf.HasSynced():
		return nil, NotSynced
	}
	obj, ok, _ := inf.GetIndexer().GetByKey(ref.Namespace + "/" + ref.Name)
	if !ok {
		return nil, Readable
	}
	src, _ := obj.(*Source)
	return src, Readable
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
// added, changed or deleted, with the gateway as stored on both sides: its
// record resolves it against the Secret as the cache has it now.
func (s *Store) onSourceChange(fn func(old, new *Gateway)) error {
	changed := func(ns, name string, before, after *Source) {
		if before == after {
			return
		}
		objs, _ := s.informer.GetIndexer().ByIndex(indexBySource, ns+"/"+name)
		for _, obj := range slices.Clip(objs) {
			g := obj.(*Gateway)
			fn(g, g)
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

// SourcesSynced tells whether the Secrets of every source namespace but
// those in skip have been listed.
func (s *Store) SourcesSynced(skip ...string) bool {
	for ns, inf := range s.sources.byNamespace {
		if !slices.Contains(skip, ns) && !inf.HasSynced() {
			return false
		}
	}
	return true
}
