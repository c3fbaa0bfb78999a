// Package publish makes the gateway a SIG-Multicluster ClusterProfile
// access provider: for each published ClusterGateway it writes its own entry
// (the hub's proxy path for that gateway and the hub CA, nothing secret)
// into the ClusterProfile the inventory sync made the gateway from, or
// into a ClusterProfile it creates and owns. It runs on the replica that
// holds the inventory sync's Lease (an inventory.Task), writes only what
// changed, and trusts nothing a ClusterProfile writer can set: what it owns
// is in its record Secrets (record.go), and the profile a synced gateway
// came from is the one the gateway's owner record names, UID included.
package publish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/clustergateway/cluster-gateway/pkg/clusters"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
	"github.com/clustergateway/cluster-gateway/pkg/health"
	"github.com/clustergateway/cluster-gateway/pkg/inventory"
)

// Params is what the publisher needs: its Config and what it works with.
type Params struct {
	Config
	Store *gateways.Store
	// Clusters is whose changes the publisher follows (not the store's).
	Clusters *clusters.Owner
	Prober   *health.Prober
	Client   kubernetes.Interface // the record Secrets, in the Store's namespace
	Dynamic  dynamic.Interface
	// SyncNamespaces are where the inventory sync reads ClusterProfiles
	// (none when it does not): synced gateways' profiles are there.
	SyncNamespaces []string
}

// Publisher publishes gateways while its replica leads.
type Publisher struct {
	cfg       Params
	hub       string
	ca        atomic.Pointer[[]byte] // the hub CA published; replaced when its file changes
	selector  labels.Selector
	informers map[string]cache.SharedIndexInformer // by namespace
	records   *records
	metrics   *Metrics

	mu     sync.Mutex
	queue  workqueue.TypedRateLimitingInterface[string] // nil unless leading
	warned map[string]bool
}

// New builds the publisher and its ClusterProfile informers.
func New(cfg Params) (*Publisher, error) {
	if err := errors.Join(cfg.Validate()...); err != nil {
		return nil, err
	}
	hub, _ := hubBase(cfg.HubServer)
	sel, _ := labels.Parse(cfg.Selector)
	p := &Publisher{cfg: cfg, hub: hub, selector: sel, informers: map[string]cache.SharedIndexInformer{}, warned: map[string]bool{},
		records: &records{client: cfg.Client, namespace: cfg.Store.Namespace()}, metrics: newMetrics()}
	var ca []byte
	if cfg.HubCAFile != "" {
		var err error
		if ca, err = LoadHubCA(cfg.HubCAFile); err != nil {
			return nil, err
		}
	}
	p.ca.Store(&ca)
	for _, ns := range append([]string{cfg.Namespace}, cfg.SyncNamespaces...) {
		if p.informers[ns] != nil {
			continue
		}
		inf := dynamicinformer.NewFilteredDynamicSharedInformerFactory(cfg.Dynamic, 0, ns, nil).ForResource(inventory.ClusterProfileResource).Informer()
		h := func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok {
				p.profileChanged(u.GetNamespace(), u.GetName())
			}
		}
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: h, UpdateFunc: func(_, o any) { h(o) }, DeleteFunc: h}); err != nil {
			return nil, err
		}
		p.informers[ns] = inf
	}
	if cfg.Clusters == nil {
		return nil, errors.New("publish: Params.Clusters is required: the publisher follows the gateways through their records")
	}
	cfg.Clusters.OnChange(func(old, new *gateways.Gateway) {
		for _, g := range []*gateways.Gateway{old, new} {
			if g != nil {
				p.enqueue(g.Name())
			}
		}
	})
	return p, nil
}

// Metrics are the publisher's metrics, to register with the server's registry.
func (p *Publisher) Metrics() *Metrics { return p.metrics }

func (p *Publisher) hubCA() []byte { return *p.ca.Load() }

// WatchHubCA reads --publish-hub-ca-file every interval until ctx ends, on
// every replica (a new leader publishes the CA its replica read). When its
// content changes, the new CA is published: every gateway's entry is
// rewritten on the leader. A file that cannot be read or holds anything
// but certificates keeps the last good CA published: the log says why (once
// per problem) and the reload metric counts a failure.
func (p *Publisher) WatchHubCA(ctx context.Context, interval time.Duration) {
	p.metrics.caOK.Set(1)
	reported := "" // the problem last logged, so each is logged once
	wait.UntilWithContext(ctx, func(context.Context) { p.reloadHubCA(&reported) }, interval)
}

// reloadHubCA reads the hub CA file once and publishes a changed CA.
func (p *Publisher) reloadHubCA(reported *string) {
	ca, err := LoadHubCA(p.cfg.HubCAFile)
	if err != nil {
		if key := err.Error(); key != *reported {
			klog.ErrorS(err, "ClusterProfile publisher: the hub CA file cannot be loaded; the last good CA stays published until it is fixed", "path", p.cfg.HubCAFile)
			p.metrics.caReloaded(false)
			*reported = key
		}
		return
	}
	if bytes.Equal(ca, p.hubCA()) {
		if *reported != "" { // back to the content in use
			*reported = ""
			p.metrics.caOK.Set(1)
		}
		return
	}
	p.ca.Store(&ca)
	*reported = ""
	p.metrics.caReloaded(true)
	klog.InfoS("ClusterProfile publisher: reloaded the hub CA file; publishing the new CA", "path", p.cfg.HubCAFile)
	p.mu.Lock()
	q := p.queue
	p.mu.Unlock()
	if q != nil {
		p.enqueueAll(q)
	}
}

// Owns tells the inventory sync which profiles are the publisher's own:
// it makes no gateway from them.
func (p *Publisher) Owns(namespace, name string, uid types.UID) bool {
	return p.records.owns(namespace, name, uid)
}

// Informers run on every replica, so a new leader starts from full caches.
func (p *Publisher) RunInformers(ctx context.Context) {
	var wg sync.WaitGroup
	for _, inf := range p.informers {
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	wg.Wait()
}

// Prepare (inventory.Task) loads the records and waits for the caches,
// before the sync's first pass reads Owns.
func (p *Publisher) Prepare(ctx context.Context) error {
	synced := []cache.InformerSynced{p.cfg.Store.HasSynced}
	for _, inf := range p.informers {
		synced = append(synced, inf.HasSynced)
	}
	if !cache.WaitForNamedCacheSyncWithContext(ctx, synced...) {
		return ctx.Err()
	}
	return p.records.load(ctx)
}

// Run (inventory.Task) publishes until ctx is done: every gateway at once
// and every probe interval (no write when nothing changed), and each
// gateway whose gateway, profile or health changed.
func (p *Publisher) Run(ctx context.Context) {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	p.mu.Lock()
	p.queue = q
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.queue = nil
		p.mu.Unlock()
		q.ShutDown()
	}()
	sub := p.cfg.Prober.Subscribe()
	defer sub.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		for {
			k, shutdown := q.Get()
			if shutdown {
				return
			}
			if err := p.sync(ctx, k); err != nil && ctx.Err() == nil {
				klog.ErrorS(err, "ClusterProfile publisher: retrying", "gateway", k)
				q.AddRateLimited(k)
			} else {
				q.Forget(k)
			}
			q.Done(k)
		}
	})
	p.enqueueAll(q)
	tick := time.NewTicker(p.cfg.Prober.Interval())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			q.ShutDown()
			return
		case <-sub.Changed():
			for _, n := range sub.Take() {
				q.Add(n)
			}
		case <-tick.C:
			p.enqueueAll(q)
		}
	}
}

func (p *Publisher) enqueueAll(q workqueue.TypedRateLimitingInterface[string]) {
	gws, _, _ := p.cfg.Store.List(nil)
	for _, g := range gws {
		q.Add(g.Name())
	}
	for _, n := range p.records.gateways() {
		q.Add(n)
	}
}

func (p *Publisher) enqueue(name string) {
	p.mu.Lock()
	q := p.queue
	p.mu.Unlock()
	if q != nil {
		q.Add(name)
	}
}

// profileChanged queues the gateways a profile may concern: the one of
// its name (owned), the one the sync makes from it, those recorded for it.
func (p *Publisher) profileChanged(ns, name string) {
	if ns == p.cfg.Namespace {
		p.enqueue(name)
	}
	p.enqueue(inventory.GatewayName(ns, name))
	for _, gw := range p.records.gateways() {
		if r, ok := p.records.get(gw); ok && r.Namespace == ns && r.Name == name {
			p.enqueue(gw)
		}
	}
}

func (p *Publisher) profile(ns, name string) *unstructured.Unstructured {
	inf := p.informers[ns]
	if inf == nil {
		return nil
	}
	obj, ok, _ := inf.GetStore().GetByKey(ns + "/" + name)
	if !ok {
		return nil
	}
	u, _ := obj.(*unstructured.Unstructured)
	return u
}

// target is where a gateway's entry goes: nil when it is not published.
func (p *Publisher) target(gw *gateways.Gateway) *Record {
	if gw == nil || !p.selector.Matches(labels.Set(gw.Object.Labels)) {
		return nil
	}
	if o, ok := gw.Owner(); ok && o.Source == string(inventory.SourceClusterProfile) {
		ns, name, _ := strings.Cut(o.Object, "/")
		// The profile the owner record names, as it was when the sync
		// made the gateway: another of its name is not this gateway's.
		if pr := p.profile(ns, name); pr != nil && pr.GetUID() == o.UID {
			return &Record{Namespace: ns, Name: name, UID: o.UID}
		}
		return nil
	}
	return &Record{Namespace: p.cfg.Namespace, Name: gw.Name(), Owned: true}
}

// sync makes one gateway's publication what it should be.
func (p *Publisher) sync(ctx context.Context, name string) error {
	if !p.records.isLoaded() {
		if err := p.records.load(ctx); err != nil {
			return err
		}
	}
	gw, err := p.cfg.Store.Get(name)
	if apierrors.IsNotFound(err) {
		gw, err = nil, nil
	}
	if err != nil {
		return err
	}
	want := p.target(gw)
	rec, has := p.records.get(name)
	if has && (want == nil || rec.Namespace != want.Namespace || rec.Name != want.Name || rec.Owned != want.Owned || (!want.Owned && rec.UID != want.UID)) {
		if err := p.withdraw(ctx, name, rec); err != nil {
			return err
		}
		has = false
	}
	if want == nil {
		return nil
	}
	if want.Owned {
		return p.syncOwned(ctx, gw, rec, has)
	}
	if !has {
		// Recorded before the entry is written, so that it can be withdrawn.
		if err := p.records.set(ctx, name, want); err != nil {
			return err
		}
	}
	pr := p.profile(want.Namespace, want.Name)
	if pr == nil || pr.GetUID() != want.UID {
		return nil
	}
	return p.patchStatus(ctx, pr, statusOps(pr, p.cfg.ProviderName, entry(p.cfg.ProviderName, p.hub, p.hubCA(), name), nil, ""))
}

// syncOwned creates the gateway's own profile if it has none, and keeps its
// status; a profile of its name that the publisher did not create is left
// alone.
func (p *Publisher) syncOwned(ctx context.Context, gw *gateways.Gateway, rec Record, has bool) error {
	name, ns := gw.Name(), p.cfg.Namespace
	pr := p.profile(ns, name)
	if pr == nil {
		client := p.cfg.Dynamic.Resource(inventory.ClusterProfileResource).Namespace(ns)
		created, err := client.Create(ctx, newProfile(ns, name), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil // in the cache soon; then decided below
		}
		if err != nil {
			return fmt.Errorf("creating ClusterProfile %s/%s: %w", ns, name, err)
		}
		r := &Record{Namespace: ns, Name: name, UID: created.GetUID(), Owned: true}
		if err := p.records.set(ctx, name, r); err != nil {
			uid := created.GetUID()
			_ = client.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
			return err
		}
		klog.InfoS("ClusterProfile publisher: created a ClusterProfile for a gateway", "gateway", name, "profile", ns+"/"+name)
		pr = created
	} else if !has || rec.UID != pr.GetUID() {
		p.warnOnce(name, "ClusterProfile publisher: a ClusterProfile the publisher did not create has this gateway's name; it is left alone and the gateway is not published (delete or rename that profile)", "gateway", name, "profile", ns+"/"+name)
		return nil
	}
	p.clearWarning(name)
	if ops := markOps(pr); ops != nil {
		// A ClusterProfile writer changed the marks of a profile the
		// publisher owns: they are put back, as consumers read them.
		updated, err := p.patch(ctx, pr, ops, "")
		if err != nil {
			return err
		}
		klog.InfoS("ClusterProfile publisher: put back the cluster-manager label and spec.clusterManager that another writer changed on a profile it owns", "gateway", name, "profile", ns+"/"+name)
		pr = updated
	}
	r, ok := p.cfg.Prober.Get(name)
	var version string
	if ok {
		version = r.ServerVersion
	}
	return p.patchStatus(ctx, pr, statusOps(pr, p.cfg.ProviderName, entry(p.cfg.ProviderName, p.hub, p.hubCA(), name), condition(r, ok, name), version))
}

// withdraw undoes what rec records for the gateway name: deletes the
// profile it created, or removes its entry from the profile it wrote
// into, and only the profile of the recorded UID.
func (p *Publisher) withdraw(ctx context.Context, name string, rec Record) error {
	client := p.cfg.Dynamic.Resource(inventory.ClusterProfileResource).Namespace(rec.Namespace)
	if rec.Owned {
		uid := rec.UID
		err := client.Delete(ctx, rec.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) { // conflict: another profile of its name, not ours
			return fmt.Errorf("deleting ClusterProfile %s/%s: %w", rec.Namespace, rec.Name, err)
		}
		klog.InfoS("ClusterProfile publisher: deleted the ClusterProfile of a gateway that is gone or no longer published", "gateway", name, "profile", rec.Namespace+"/"+rec.Name)
	} else if pr := p.profile(rec.Namespace, rec.Name); pr != nil && pr.GetUID() == rec.UID {
		if err := p.patchStatus(ctx, pr, statusOps(pr, p.cfg.ProviderName, nil, nil, "")); err != nil {
			return err
		}
	}
	return p.records.set(ctx, name, nil)
}

// patchStatus applies ops (none: nothing to do) to the profile's status.
func (p *Publisher) patchStatus(ctx context.Context, pr *unstructured.Unstructured, ops []op) error {
	if len(ops) == 0 {
		return nil
	}
	_, err := p.patch(ctx, pr, ops, "status")
	return err
}

// patch applies ops to the profile or, with subresource "status", its status.
func (p *Publisher) patch(ctx context.Context, pr *unstructured.Unstructured, ops []op, subresource string) (*unstructured.Unstructured, error) {
	body, err := json.Marshal(ops)
	if err != nil {
		return nil, err
	}
	var sub []string
	what := "metadata and spec"
	if subresource != "" {
		sub, what = []string{subresource}, subresource
	}
	out, err := p.cfg.Dynamic.Resource(inventory.ClusterProfileResource).Namespace(pr.GetNamespace()).
		Patch(ctx, pr.GetName(), types.JSONPatchType, body, metav1.PatchOptions{FieldManager: "cluster-gateway-publisher"}, sub...)
	if err != nil {
		return nil, fmt.Errorf("writing the %s of ClusterProfile %s/%s: %w", what, pr.GetNamespace(), pr.GetName(), err)
	}
	return out, nil
}

func (p *Publisher) warnOnce(key, msg string, kv ...any) {
	p.mu.Lock()
	was := p.warned[key]
	p.warned[key] = true
	p.mu.Unlock()
	if !was {
		klog.InfoS(msg, kv...)
	}
}

func (p *Publisher) clearWarning(key string) {
	p.mu.Lock()
	delete(p.warned, key)
	p.mu.Unlock()
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
