package gateways

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// Resource is the API resource the gateways are, for errors.
var Resource = v1alpha1.Resource("clustergateways")

// Store holds the ClusterGateways of one hub namespace: an informer over
// their labelled Secrets whose cache holds each gateway parsed once per
// resourceVersion, and the informers over the credential Secrets gateways
// may name. The API (pkg/registry) reads and writes through it; its
// followers (OnChange) are the clusters' records (pkg/clusters), which
// resolve each gateway's credential and keep the per-cluster state, and the
// inventory sync.
type Store struct {
	namespace string
	client    kubernetes.Interface
	informer  cache.SharedIndexInformer
	sources   *sources           // the credential Secrets gateways name
	clock     clock.PassiveClock // certificate validity is judged by it
	metrics   *Metrics
	// resolver completes gateways whose credential has a source, for the
	// API's view (nil: none, such a gateway is not Ready).
	resolver atomic.Pointer[Resolver]
}

// NewStore builds the informers; Run starts them. Gateways may name
// credential Secrets in sourceNamespaces (by default, only namespace).
func NewStore(client kubernetes.Interface, namespace string, sourceNamespaces ...string) *Store {
	// Without the factory's namespace index: one namespace, read by key,
	// and the index kept a set of every gateway's key (about 100 bytes per
	// gateway).
	inf := coreinformers.NewFilteredSecretInformer(client, namespace, 0, cache.Indexers{indexBySource: indexSources},
		func(o *metav1.ListOptions) { o.LabelSelector = LabelGateway + "=true" })
	s := &Store{namespace: namespace, client: client, informer: inf, clock: clock.RealClock{}}
	// The cache keeps parsed gateways, not Secrets: parsing happens once per
	// event, never on a request, and the Secret is not kept beside it.
	_ = s.informer.SetTransform(func(obj interface{}) (interface{}, error) {
		if sec, ok := obj.(*corev1.Secret); ok {
			return parseAt(sec, s.clock.Now()), nil
		}
		return obj, nil // already a *Gateway, or a tombstone
	})
	s.metrics = newMetrics(s)
	if len(sourceNamespaces) == 0 {
		sourceNamespaces = []string{namespace}
	}
	s.sources = s.newSources(sourceNamespaces)
	return s
}

// Run runs the informers until ctx is done.
func (s *Store) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { s.sources.run(ctx) })
	s.informer.RunWithContext(ctx)
	wg.Wait()
}

// HasSynced reports whether the first list of gateways has been read. The
// credential Secrets are not waited for: a namespace the gateway cannot list
// makes only the gateways that name it not Ready.
func (s *Store) HasSynced() bool { return s.informer.HasSynced() }

// ReadsSourcesIn tells whether gateways may name credential Secrets in ns.
func (s *Store) ReadsSourcesIn(ns string) bool {
	_, ok := s.sources.byNamespace[ns]
	return ok
}

// Namespace is where the Secrets live.
func (s *Store) Namespace() string { return s.namespace }

// OnChange calls fn for every gateway added (old nil), changed, or deleted
// (new nil), in the order the hub reported them, and for every gateway whose
// credential Secret changed (rotated, created or deleted; then old and new
// are the same stored gateway). The gateways are as stored, not resolved
// (see Stored). fn must not block.
func (s *Store) OnChange(fn func(old, new *Gateway)) error {
	_, err := s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if g, ok := obj.(*Gateway); ok {
				fn(nil, g)
			}
		},
		UpdateFunc: func(oldObj, newObj interface{}) {
			o, ok1 := oldObj.(*Gateway)
			n, ok2 := newObj.(*Gateway)
			if ok1 && ok2 && o != n {
				fn(o, n)
			}
		},
		DeleteFunc: func(obj interface{}) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if g, ok := obj.(*Gateway); ok {
				fn(g, nil)
			}
		},
	})
	if err != nil {
		return err
	}
	return s.onSourceChange(fn)
}

// ResolveThrough has the API's view (Get, List, the writes' and watches'
// results) complete gateways whose credential has a source through r: the
// clusters' records, which alone resolve credentials.
func (s *Store) ResolveThrough(r Resolver) { s.resolver.Store(&r) }

// Now is the time by the store's clock, which judges certificates' validity.
func (s *Store) Now() time.Time { return s.clock.Now() }

// Stored returns the named gateway as its Secret stores it, not resolved
// against its credential's source (its record does that), or a NotFound
// error.
func (s *Store) Stored(name string) (*Gateway, error) {
	obj, ok, err := s.informer.GetIndexer().GetByKey(s.namespace + "/" + name)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, apierrors.NewNotFound(Resource, name)
	}
	return obj.(*Gateway), nil
}

// Get returns the named gateway as it is now, its credential resolved, or a
// NotFound error.
func (s *Store) Get(name string) (*Gateway, error) {
	g, err := s.Stored(name)
	if err != nil {
		return nil, err
	}
	return s.view(g, s.clock.Now()), nil
}

// view is g as the API shows it as of now: resolved by the records when g's
// credential has a source.
func (s *Store) view(g *Gateway, now time.Time) *Gateway {
	if g.HasSource() {
		if r := s.resolver.Load(); r != nil {
			return (*r).Resolve(g)
		}
	}
	return g.at(now)
}

// List returns the gateways whose labels (the gateway's own, from its
// Secret's data) match, and the resourceVersion the cache had reached before
// it was read: a watch from it may repeat events, never miss one.
func (s *Store) List(selector labels.Selector) ([]*Gateway, string, error) {
	rv := s.informer.LastSyncResourceVersion()
	now := s.clock.Now()
	objs := s.informer.GetIndexer().List()
	out := make([]*Gateway, 0, len(objs))
	for _, obj := range objs {
		g := obj.(*Gateway)
		if selector != nil && !selector.Matches(labels.Set(g.Object.Labels)) {
			continue
		}
		out = append(out, s.view(g, now))
	}
	return out, rv, nil
}

// Create writes a new gateway's Secret. With dryRun nothing is stored.
func (s *Store) Create(ctx context.Context, gw *v1alpha1.ClusterGateway, dryRun []string) (*Gateway, error) {
	return s.create(ctx, gw, nil, dryRun)
}

func (s *Store) create(ctx context.Context, gw *v1alpha1.ClusterGateway, owner *Owner, dryRun []string) (*Gateway, error) {
	sec, err := toSecret(gw, nil, s.namespace)
	if err == nil {
		err = setOwner(sec.Data, owner)
	}
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	created, err := s.client.CoreV1().Secrets(s.namespace).Create(ctx, sec, metav1.CreateOptions{DryRun: dryRun})
	if err != nil {
		return nil, translateError(err, gw.Name)
	}
	if len(dryRun) == 0 {
		s.waitForCache(ctx, created.Name, func(g *Gateway) bool { return g != nil && g.Object.UID == created.UID })
	}
	return s.view(parseAt(created, s.clock.Now()), s.clock.Now()), nil
}

// Update rewrites existing's Secret with gw. Keys and metadata of the Secret
// that the gateway does not model are kept, the inventory sync's owner
// record (KeyOwner) included.
func (s *Store) Update(ctx context.Context, gw *v1alpha1.ClusterGateway, existing *Current, dryRun []string) (*Gateway, error) {
	return s.update(ctx, gw, existing, nil, dryRun)
}

func (s *Store) update(ctx context.Context, gw *v1alpha1.ClusterGateway, existing *Current, owner *Owner, dryRun []string) (*Gateway, error) {
	sec, err := toSecret(gw, existing.secret, s.namespace)
	if err == nil {
		err = setOwner(sec.Data, owner)
	}
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	updated, err := s.client.CoreV1().Secrets(s.namespace).Update(ctx, sec, metav1.UpdateOptions{DryRun: dryRun})
	if err != nil {
		return nil, translateError(err, gw.Name)
	}
	if len(dryRun) == 0 {
		s.waitForCache(ctx, gw.Name, func(g *Gateway) bool {
			return g == nil || g.Object.UID != updated.UID || g.Object.ResourceVersion == updated.ResourceVersion || newer(g.Object.ResourceVersion, updated.ResourceVersion)
		})
	}
	return s.view(parseAt(updated, s.clock.Now()), s.clock.Now()), nil
}

// Delete removes existing's Secret.
func (s *Store) Delete(ctx context.Context, existing *Gateway, opts metav1.DeleteOptions) error {
	name := existing.Object.Name
	if err := s.client.CoreV1().Secrets(s.namespace).Delete(ctx, name, opts); err != nil {
		return translateError(err, name)
	}
	if len(opts.DryRun) == 0 {
		s.waitForCache(ctx, name, func(g *Gateway) bool { return g == nil || g.Object.UID != existing.Object.UID })
	}
	return nil
}

// waitForCache waits briefly until the cache has seen a write, so a client
// that reads right after writing sees its own write (on this replica). It
// gives up quietly: the write has happened; the cache will catch up.
func (s *Store) waitForCache(ctx context.Context, name string, done func(*Gateway) bool) {
	_ = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		g, err := s.Get(name)
		if apierrors.IsNotFound(err) {
			g = nil
		} else if err != nil {
			return false, nil
		}
		return done(g), nil
	})
}

// newer compares resourceVersions as the hub's etcd revisions they are; an
// unparsable one is never newer.
func newer(a, b string) bool {
	var x, y uint64
	if _, err := fmt.Sscan(a, &x); err != nil {
		return false
	}
	if _, err := fmt.Sscan(b, &y); err != nil {
		return false
	}
	return x > y
}

// translateError names the gateway, not its Secret, in the hub's errors.
// An error without an answer from the hub (refused, reset, timed out) is
// 503 naming the hub: while it is down, gateways cannot be written, watched
// or read as the most recent, but reads with a resourceVersion and proxied
// requests are served from the cache.
func translateError(err error, name string) error {
	if _, ok := err.(apierrors.APIStatus); !ok {
		return apierrors.NewServiceUnavailable(fmt.Sprintf(
			"the hub's API server, which stores ClusterGateways as Secrets, could not be reached (proxied requests, and reads with a resourceVersion such as 0, are served from the gateway's cache meanwhile): %v", err))
	}
	switch {
	case apierrors.IsNotFound(err):
		return apierrors.NewNotFound(Resource, name)
	case apierrors.IsAlreadyExists(err):
		return apierrors.NewAlreadyExists(Resource, name)
	case apierrors.IsConflict(err):
		return apierrors.NewConflict(Resource, name, fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
	case apierrors.IsForbidden(err):
		return apierrors.NewInternalError(fmt.Errorf("the gateway may not write its Secrets in its namespace; check its RBAC (config/rbac.yaml): %s", err.(apierrors.APIStatus).Status().Message))
	}
	return err
}
