package inventory

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
)

// LeaseName is the Lease, in the gateways' namespace, that the replica
// which syncs holds.
const LeaseName = "cluster-gateway-inventory-sync"

// Params is what the sync needs: its Config and what it works with.
type Params struct {
	Config
	// Store is where the gateways are. The sync writes through it, that is
	// the Secrets directly, as the gateway's own identity, not through the
	// API: the API's rule that a writer naming a credential Secret may get
	// it guards users, and the gateway reads every Secret of its source
	// namespaces anyway. Only the sync writes through CreateOwned and
	// UpdateOwned, which record what it owns where API writes cannot.
	// Its Lease is in the Store's namespace.
	Store *gateways.Store
	// Client is the hub; Dynamic reads ClusterProfiles (needed only for that sync).
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	// Namespaces are where inventories are read: the gateway's own and its
	// credential source namespaces, the only ones whose Secrets it reads.
	Namespaces []string
	// Identity names this replica in the Lease.
	Identity string
	// Skip names ClusterProfiles the sync makes no gateway from: those the
	// ClusterProfile publisher (pkg/publish) created. Nil: none.
	Skip func(namespace, name string, uid types.UID) bool
	// Tasks run beside the sync while this replica holds the Lease.
	Tasks []Task
}

// Task is work done only by the replica that holds the Lease (one writer):
// Prepare before the sync's first pass, tried again until it succeeds, then
// Run until the context is done.
type Task interface {
	Prepare(ctx context.Context) error
	Run(ctx context.Context)
}

// Controller keeps the gateways in sync with the inventories while this
// replica holds the Lease. Its informers run on every replica, so a new
// leader starts from full caches.
type Controller struct {
	cfg       Params
	informers map[Source][]cache.SharedIndexInformer
	queue     atomic.Pointer[workqueue.TypedRateLimitingInterface[string]] // nil unless leading
	metrics   *Metrics

	mu         sync.Mutex
	collisions map[string]bool // keys whose gateway name another gateway holds
}

// New builds the informers of the configured inventories; Run runs them.
func New(cfg Params) (*Controller, error) {
	if cfg.Syncs(SourceClusterProfile) && cfg.Dynamic == nil {
		return nil, errors.New("inventory: the ClusterProfile sync needs a dynamic client")
	}
	c := &Controller{cfg: cfg, informers: map[Source][]cache.SharedIndexInformer{}, collisions: map[string]bool{}}
	c.metrics = newMetrics(c)
	seen := map[string]bool{}
	for _, ns := range cfg.Namespaces {
		if seen[ns] {
			continue
		}
		seen[ns] = true
		if cfg.Syncs(SourceCAPI) {
			f := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithNamespace(ns),
				informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "type=" + string(capiSecretType) }))
			inf := f.Core().V1().Secrets().Informer()
			_ = inf.SetTransform(func(obj interface{}) (interface{}, error) {
				if s, ok := obj.(*corev1.Secret); ok {
					return capiSecret(s), nil
				}
				return obj, nil
			})
			c.informers[SourceCAPI] = append(c.informers[SourceCAPI], inf)
		}
		if cfg.Syncs(SourceClusterProfile) {
			f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(cfg.Dynamic, 0, ns, nil)
			c.informers[SourceClusterProfile] = append(c.informers[SourceClusterProfile], f.ForResource(ClusterProfileResource).Informer())
		}
	}
	for src, infs := range c.informers {
		for _, inf := range infs {
			if _, err := inf.AddEventHandler(c.sourceHandler(src)); err != nil {
				return nil, err
			}
		}
	}
	// A synced gateway changed or deleted by someone else is put back.
	if err := cfg.Store.OnChange(func(old, new *gateways.Gateway) {
		for _, g := range []*gateways.Gateway{old, new} {
			if g != nil {
				for _, k := range c.keysOf(g) {
					c.enqueue(k)
				}
			}
		}
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// Metrics are the sync's metrics, for the server's registry.
func (c *Controller) Metrics() *Metrics { return c.metrics }

// key is a work item: an inventory and one of its objects' namespace/name.
func key(src Source, namespacedName string) string { return string(src) + "/" + namespacedName }

// keysOf is the work items a gateway may concern: the object its owner
// record names, and the one its labels name (a gateway an earlier version
// synced, which had no record: see ownershipOf). Queuing one decides
// nothing: sync reads the record.
func (c *Controller) keysOf(g *gateways.Gateway) []string {
	var keys []string
	if o, ok := g.Owner(); ok && c.cfg.Syncs(Source(o.Source)) {
		keys = append(keys, key(Source(o.Source), o.Object))
	}
	if from := Source(g.Object.Labels[LabelSyncedFrom]); c.cfg.Syncs(from) && g.Object.Annotations[AnnotationSource] != "" {
		if k := key(from, g.Object.Annotations[AnnotationSource]); len(keys) == 0 || keys[0] != k {
			keys = append(keys, k)
		}
	}
	return keys
}

func splitKey(k string) (src Source, namespace, name string) {
	parts := strings.SplitN(k, "/", 3)
	if len(parts) != 3 {
		return "", "", ""
	}
	return Source(parts[0]), parts[1], parts[2]
}

func (c *Controller) sourceHandler(src Source) cache.ResourceEventHandler {
	add := func(obj interface{}) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			c.enqueue(key(src, t.Key))
			return
		}
		if k, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			c.enqueue(key(src, k))
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    add,
		UpdateFunc: func(_, obj interface{}) { add(obj) },
		DeleteFunc: add,
	}
}

// enqueue adds a work item while this replica leads; otherwise nothing:
// a new leader starts with every item anyway.
func (c *Controller) enqueue(k string) {
	if q := c.queue.Load(); q != nil {
		(*q).Add(k)
	}
}

// Run runs the informers and campaigns for the Lease until ctx is done;
// while leading it syncs. It returns when everything it started has stopped
// and the Lease, if held, is released.
func (c *Controller) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, infs := range c.informers {
		for _, inf := range infs {
			wg.Go(func() { inf.RunWithContext(ctx) })
		}
	}
	for ctx.Err() == nil {
		c.campaign(ctx)
	}
}

// campaign waits for the Lease and syncs while it is held. The elector
// runs on a context of its own, cancelled only once the sync has stopped:
// it releases the Lease then, never while a write may still be under way.
func (c *Controller) campaign(ctx context.Context) {
	acquired := make(chan context.Context, 1)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: c.cfg.Store.Namespace(), Name: LeaseName},
			Client:     c.cfg.Client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: c.cfg.Identity},
		},
		LeaseDuration:   c.cfg.LeaseDuration,
		RenewDeadline:   c.cfg.RenewDeadline,
		RetryPeriod:     c.cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) { acquired <- lctx }, // buffered: returns at once
			OnStoppedLeading: func() {},
		},
	})
	if err != nil { // only for a configuration Config.Validate refuses
		klog.ErrorS(err, "Inventory sync: cannot campaign for the Lease")
		<-ctx.Done()
		return
	}
	electCtx, stopElecting := context.WithCancel(context.WithoutCancel(ctx))
	elected := make(chan struct{})
	go func() { defer close(elected); le.Run(electCtx) }()
	select {
	case lctx := <-acquired:
		klog.InfoS("Inventory sync: this replica holds the Lease and syncs", "lease", c.cfg.Store.Namespace()+"/"+LeaseName, "identity", c.cfg.Identity)
		c.lead(ctx, lctx)
		klog.InfoS("Inventory sync: this replica stopped syncing", "identity", c.cfg.Identity, "shuttingDown", ctx.Err() != nil)
	case <-ctx.Done():
	case <-elected:
	}
	stopElecting()
	<-elected
}

// lead syncs until ctx is done or the Lease is lost (lctx done).
func (c *Controller) lead(ctx, lctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(lctx, cancel)
	defer stop()
	synced := []cache.InformerSynced{c.cfg.Store.HasSynced}
	for _, infs := range c.informers {
		for _, inf := range infs {
			synced = append(synced, inf.HasSynced)
		}
	}
	if !cache.WaitForNamedCacheSyncWithContext(ctx, synced...) {
		return
	}
	for _, t := range c.cfg.Tasks {
		for {
			err := t.Prepare(ctx)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			klog.ErrorS(err, "Inventory sync: a task of the Lease holder cannot start; trying again")
			select {
			case <-ctx.Done():
				return
			case <-time.After(c.cfg.RetryPeriod):
			}
		}
	}
	var tasks sync.WaitGroup
	defer tasks.Wait()
	for _, t := range c.cfg.Tasks {
		tasks.Go(func() { t.Run(ctx) })
	}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	c.queue.Store(&q)
	c.metrics.leader.Set(1)
	defer func() {
		c.queue.Store(nil)
		q.ShutDown()
		c.metrics.leader.Set(0)
	}()
	c.enqueueAll(q)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for c.processNext(ctx, q) {
			}
		})
	}
	<-ctx.Done()
	q.ShutDown()
	wg.Wait()
}

// enqueueAll queues every inventory object and every gateway synced from
// one: a gateway whose source is gone is deleted (the garbage collection of
// a new leader).
func (c *Controller) enqueueAll(q workqueue.TypedRateLimitingInterface[string]) {
	for src, infs := range c.informers {
		for _, inf := range infs {
			for _, k := range inf.GetStore().ListKeys() {
				q.Add(key(src, k))
			}
		}
	}
	gws, _, _ := c.cfg.Store.List(nil)
	for _, g := range gws {
		for _, k := range c.keysOf(g) {
			q.Add(k)
		}
	}
}

func (c *Controller) processNext(ctx context.Context, q workqueue.TypedRateLimitingInterface[string]) bool {
	k, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(k)
	if err := c.sync(ctx, k); err != nil && ctx.Err() == nil {
		src, _, _ := splitKey(k)
		c.metrics.errors.WithLabelValues(string(src), "WriteFailed").Inc()
		klog.ErrorS(err, "Inventory sync: retrying", "item", k)
		q.AddRateLimited(k)
		return true
	}
	q.Forget(k)
	return true
}

// sync makes the gateway of one inventory object what the object asks for:
// created, updated in the fields the sync owns, or deleted when the object
// is gone, asks for none or was replaced. A gateway whose owner record does
// not name this object is never written.
func (c *Controller) sync(ctx context.Context, k string) error {
	src, ns, name := splitKey(k)
	want, err := c.desired(src, ns, name)
	if err != nil {
		c.metrics.errors.WithLabelValues(string(src), "InvalidSource").Inc()
		// A gateway synced from it before stays until it is fixed or deleted.
		klog.ErrorS(err, "Inventory sync: no gateway for this object; fix it in the inventory", "inventory", src, "object", ns+"/"+name)
		return nil
	}
	object := ns + "/" + name
	gwName := gatewayNameFor(src, ns, name)
	existing, err := c.cfg.Store.Get(gwName)
	if apierrors.IsNotFound(err) {
		existing, err = nil, nil
	}
	if err != nil {
		return err
	}
	adopt := false
	if existing != nil {
		switch ownershipOf(existing, src, object, want) {
		case notOwned:
			c.setCollision(k, want != nil, gwName, existing)
			return nil
		case stale:
			c.setCollision(k, false, "", nil)
			if err := c.deleteOwned(ctx, src, object, existing); err != nil || want == nil {
				return err
			}
			existing = nil // and the object as it is now gets a gateway of its own
		case adoptable:
			adopt = true
		}
	}
	c.setCollision(k, false, "", nil)
	switch {
	case want == nil:
		return nil
	case existing == nil:
		if errs := v1alpha1.ValidateClusterGateway(want); len(errs) > 0 {
			c.metrics.errors.WithLabelValues(string(src), "InvalidSource").Inc()
			klog.ErrorS(errs.ToAggregate(), "Inventory sync: the gateway this object asks for is not valid; fix it in the inventory", "inventory", src, "object", object, "gateway", gwName)
			return nil
		}
		if _, err := c.cfg.Store.CreateOwned(ctx, want, ownerOf(src, object, want)); err != nil {
			return fmt.Errorf("creating gateway %s: %w", gwName, err)
		}
		c.metrics.writes.WithLabelValues(string(src), "create").Inc()
		klog.InfoS("Inventory sync: created a gateway", "gateway", gwName, "inventory", src, "object", object)
		return nil
	case !adopt && upToDate(existing.Object, want):
		return nil
	}
	cur, err := c.cfg.Store.GetCurrent(ctx, gwName)
	if err != nil {
		return err
	}
	if o := ownershipOf(cur.Gateway, src, object, want); o != owned && o != adoptable {
		return fmt.Errorf("gateway %s changed hands while being synced; trying again", gwName)
	}
	gw := merge(cur.Object, want)
	if errs := v1alpha1.ValidateClusterGateway(gw); len(errs) > 0 {
		c.metrics.errors.WithLabelValues(string(src), "InvalidSource").Inc()
		klog.ErrorS(errs.ToAggregate(), "Inventory sync: the gateway this object asks for is not valid; fix it in the inventory", "inventory", src, "object", object, "gateway", gwName)
		return nil
	}
	if _, err := c.cfg.Store.UpdateOwned(ctx, gw, cur, ownerOf(src, object, want)); err != nil {
		return fmt.Errorf("updating gateway %s: %w", gwName, err)
	}
	c.metrics.writes.WithLabelValues(string(src), "update").Inc()
	if adopt {
		klog.InfoS("Inventory sync: adopted a gateway an earlier version synced (it was already what the sync writes; its owner record is now written)", "gateway", gwName, "inventory", src, "object", object)
	} else {
		klog.InfoS("Inventory sync: updated a gateway", "gateway", gwName, "inventory", src, "object", object)
	}
	return nil
}

// deleteOwned deletes the sync's gateway g of an object that is gone, asks
// for no gateway, or was replaced by another of its name.
func (c *Controller) deleteOwned(ctx context.Context, src Source, object string, g *gateways.Gateway) error {
	if err := c.cfg.Store.Delete(ctx, g, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &g.Object.UID}}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting gateway %s: %w", g.Name(), err)
	}
	c.metrics.writes.WithLabelValues(string(src), "delete").Inc()
	klog.InfoS("Inventory sync: deleted a gateway whose source is gone or no longer asks for it", "gateway", g.Name(), "inventory", src, "object", object)
	return nil
}

// desired is the gateway the object asks for; nil when it is gone or asks
// for none.
func (c *Controller) desired(src Source, ns, name string) (*v1alpha1.ClusterGateway, error) {
	obj, ok := c.lookup(src, ns, name)
	if !ok {
		return nil, nil
	}
	switch o := obj.(type) {
	case *corev1.Secret:
		return capiGateway(o), nil
	case *unstructured.Unstructured:
		if c.cfg.Skip != nil && c.cfg.Skip(o.GetNamespace(), o.GetName(), o.GetUID()) {
			return nil, nil
		}
		gw, err := profileGateway(o, c.cfg.Providers)
		if err != nil {
			return nil, fmt.Errorf("ClusterProfile %s/%s: %w", ns, name, err)
		}
		return gw, nil
	}
	return nil, nil
}

func (c *Controller) lookup(src Source, ns, name string) (interface{}, bool) {
	for _, inf := range c.informers[src] {
		if obj, ok, _ := inf.GetStore().GetByKey(ns + "/" + name); ok {
			return obj, true
		}
	}
	return nil, false
}

// ownership is what the sync may do with a gateway that has the name of an
// inventory object's gateway.
type ownership int

const (
	// notOwned: leave it alone (a collision).
	notOwned ownership = iota
	// owned: its owner record names the object as it is now: keep it in sync.
	owned
	// stale: its owner record names the object, which is gone, asks for no
	// gateway, or is another object of that name (its UID): delete it.
	stale
	// adoptable: no owner record, but it is already exactly what the sync
	// writes for the object, the labels and annotations naming the object
	// and its UID included: a gateway an earlier version synced, before
	// owner records. Adopting it writes the record and nothing else, so it
	// gives the sync no power over where the gateway sends what: marks forged
	// before API writes refused them cannot hand over a gateway that differs.
	adoptable
)

// ownershipOf is the sync's ownership of g as the gateway of the object
// (<namespace>/<name>) of inventory src, which asks for want (nil: none,
// or the object is gone). It reads the owner record, which only the sync
// writes, never the labels and annotations alone.
func ownershipOf(g *gateways.Gateway, src Source, object string, want *v1alpha1.ClusterGateway) ownership {
	o, ok := g.Owner()
	switch {
	case ok && o.Source == string(src) && o.Object == object:
		if want == nil || o.UID != sourceUID(want) {
			return stale
		}
		return owned
	case !ok && want != nil && upToDate(g.Object, want):
		return adoptable
	}
	return notOwned
}

// ownerOf is the owner record of the gateway want of the object of src.
func ownerOf(src Source, object string, want *v1alpha1.ClusterGateway) gateways.Owner {
	return gateways.Owner{Source: string(src), Object: object, UID: sourceUID(want)}
}

// sourceUID is the UID of the object a desired gateway is synced from.
func sourceUID(want *v1alpha1.ClusterGateway) types.UID {
	return types.UID(want.Annotations[AnnotationSourceUID])
}

// The fields the sync owns: the endpoint, the credential, its label and its
// annotations. Labels, annotations and the impersonation mode that others
// set are kept.
func upToDate(have, want *v1alpha1.ClusterGateway) bool {
	he, we := have.Spec.Endpoint, want.Spec.Endpoint
	if he.Type != we.Type || he.Address != we.Address || !bytes.Equal(he.CABundle, we.CABundle) || he.ServerName != we.ServerName ||
		he.InsecureSkipTLSVerify != we.InsecureSkipTLSVerify || he.ProxyURL != we.ProxyURL {
		return false
	}
	hc, wc := have.Spec.Credential, want.Spec.Credential
	if hc.Type != wc.Type || hc.X509 != nil || hc.BearerToken != "" || !sameSecretRef(hc.SecretRef, wc.SecretRef) || !sameProvider(hc.Provider, wc.Provider) {
		return false
	}
	for k, v := range want.Labels {
		if have.Labels[k] != v {
			return false
		}
	}
	for k, v := range want.Annotations {
		if have.Annotations[k] != v {
			return false
		}
	}
	return true
}

func sameSecretRef(a, b *v1alpha1.SecretReference) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

func sameProvider(a, b *v1alpha1.ProviderReference) bool {
	if (a == nil) != (b == nil) {
		return false
	}
	if a == nil {
		return true
	}
	var ac, bc []byte
	if a.Config != nil {
		ac = a.Config.Raw
	}
	if b.Config != nil {
		bc = b.Config.Raw
	}
	return a.Name == b.Name && bytes.Equal(ac, bc)
}

// merge is have with the fields the sync owns taken from want.
func merge(have, want *v1alpha1.ClusterGateway) *v1alpha1.ClusterGateway {
	gw := have.DeepCopy()
	gw.Status = v1alpha1.ClusterGatewayStatus{}
	gw.Spec.Endpoint = want.Spec.Endpoint
	gw.Spec.Credential = want.Spec.Credential
	if gw.Labels == nil {
		gw.Labels = map[string]string{}
	}
	maps.Copy(gw.Labels, want.Labels)
	if gw.Annotations == nil {
		gw.Annotations = map[string]string{}
	}
	maps.Copy(gw.Annotations, want.Annotations)
	return gw
}

// setCollision records whether the object k's gateway name is held by a
// gateway that is not its own (logged once, counted in a gauge).
func (c *Controller) setCollision(k string, collides bool, gwName string, holder *gateways.Gateway) {
	c.mu.Lock()
	was := c.collisions[k]
	if collides {
		c.collisions[k] = true
	} else {
		delete(c.collisions, k)
	}
	c.mu.Unlock()
	if collides && !was {
		src, ns, name := splitKey(k)
		klog.InfoS("Inventory sync: a gateway that the sync does not own has this object's name; it is left alone and this object gets no gateway (rename or delete that gateway)",
			"gateway", gwName, "inventory", src, "object", ns+"/"+name, "holderSyncedFrom", holder.Object.Labels[LabelSyncedFrom], "holderSource", holder.Object.Annotations[AnnotationSource])
	}
}

// collisionsBySource counts the current collisions, for the gauge.
func (c *Controller) collisionsBySource() map[Source]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[Source]int{}
	for k := range c.collisions {
		src, _, _ := splitKey(k)
		out[src]++
	}
	return out
}
