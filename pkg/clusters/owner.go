// Package clusters keeps what the gateway holds for each cluster in one
// record, owned by one Owner, the only follower of the gateway store besides
// the inventory sync. A gateway's creation, change or deletion is one step
// under its record's lock: the record resolves the gateway's credential
// (stored in it, from a Secret, or from a provider), keeps it with what it
// was resolved from, takes its pool target, starts its probe state over
// when the cluster is reached differently (its limiter Slots are made with
// the record and dropped with it), and the pool, the prober and the
// credential providers are told in that step; the deletion step stops the
// probe state with the record. The prober (pkg/health) keeps no state of
// its own: it reads and updates the records'. The store's API view reads
// resolved gateways through the Owner (gateways.Store.ResolveThrough). The
// proxy takes a cluster's record once per request (Take: a Handle with the
// gateway, its Slots and Lease) and leases a transport through the record,
// under the same lock, so no lease is taken for a cluster whose deletion has
// passed.
package clusters

import (
	"fmt"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/credentials"
	"github.com/clustergateway/cluster-gateway/pkg/fairness"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
	"github.com/clustergateway/cluster-gateway/pkg/health"
	"github.com/clustergateway/cluster-gateway/pkg/pool"
)

// Tunnel is the konnectivity client: dials through the proxy-server, with an
// ID that changes when its credentials rotate.
type Tunnel interface {
	pool.Dialer
	ID() string
}

// Config is what the Owner follows and tells.
type Config struct {
	// Store holds the gateways; the Owner follows it. Required.
	Store *gateways.Store
	// Pool holds the clusters' transports. Required.
	Pool *pool.Pool
	// Providers run gateways' credential providers; nil: none.
	Providers *credentials.Providers
	// Tunnel dials Konnectivity endpoints; nil when no proxy-server is configured.
	Tunnel Tunnel
	// Limiter bounds each cluster's requests with the Slots its record
	// keeps; nil: no bound.
	Limiter *fairness.Limiter
}

// Owner holds one record per cluster, in one map.
type Owner struct {
	cfg Config

	mu        sync.RWMutex
	records   map[string]*record
	followers []func(old, new *gateways.Gateway)
	probe     atomic.Pointer[func(name string, reset bool)] // the prober's (OnProbe); nil: none
}

// record is one cluster's state. Its lock serializes the steps that change
// it (write lock) against the leases taken through it (read lock).
type record struct {
	mu sync.RWMutex
	// in is what base, the gateway with its credential resolved, was
	// resolved from (the stored version, its source's or provider's state):
	// it is resolved again only when one of them changes.
	in   inputs
	base *gateways.Gateway
	gw   *gateways.Gateway // the current version: base as of the last step
	gone bool              // its deletion step has passed
	// target is the pool key of gw, built once per version (and again when
	// the tunnel's ID changes); targetErr why gw has none.
	target    atomic.Pointer[pool.Target]
	targetErr error
	// probe is the cluster's probe state (pkg/health), made with the
	// record, started over in a change step, stopped in the deletion step;
	// set before the record is in the map, never replaced.
	probe *health.State
	// slots are the cluster's share of the Limiter (its slots and queues),
	// made with the record and dropped with it; set before the record is
	// in the map, never replaced.
	slots *fairness.Slots
}

// New returns the Owner, following cfg.Store from here on: call it before
// the store runs.
func New(cfg Config) (*Owner, error) {
	if cfg.Store == nil || cfg.Pool == nil {
		return nil, fmt.Errorf("clusters: Config.Store and Config.Pool are required")
	}
	o := &Owner{cfg: cfg, records: map[string]*record{}}
	if err := cfg.Store.OnChange(o.changed); err != nil {
		return nil, err
	}
	if cfg.Providers != nil {
		// A provider's new credential or failure is a step of its record.
		cfg.Providers.OnChange(func(name string) { o.sync(name) })
	}
	cfg.Store.ResolveThrough(o)
	return o, nil
}

// OnChange calls fn for every gateway added (old nil), changed or deleted
// (new nil), its credential resolved, as part of that cluster's step, after
// the record was updated. fn runs under the record's lock: it must not
// block, nor read through the Owner or the store. Register before the store
// runs.
func (o *Owner) OnChange(fn func(old, new *gateways.Gateway)) {
	o.mu.Lock()
	o.followers = append(o.followers, fn)
	o.mu.Unlock()
}

// OnProbe has each cluster's step call fn (the prober's): with reset when
// the record's probe state is new or started over, without when the
// cluster should be probed soon. fn is called at once for each record
// there is (reset), so a prober that comes after the store ran misses none.
// fn runs under the record's lock: it must not block, nor read through the
// Owner.
func (o *Owner) OnProbe(fn func(name string, reset bool)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.probe.Store(&fn)
	for name := range o.records {
		fn(name, true)
	}
}

// tellProber tells the prober, if one follows, of the named cluster's
// step (OnProbe); read at the step, after its probe state changed.
func (o *Owner) tellProber(name string, reset bool) {
	if fn := o.probe.Load(); fn != nil {
		(*fn)(name, reset)
	}
}

// ProbeState is the named cluster's probe state (the prober's view of the
// records); nil when the cluster has no record.
func (o *Owner) ProbeState(name string) *health.State {
	o.mu.RLock()
	defer o.mu.RUnlock()
	if rec, ok := o.records[name]; ok {
		return rec.probe
	}
	return nil
}

// EachProbeState calls fn with each record's probe state.
func (o *Owner) EachProbeState(fn func(*health.State)) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	for _, rec := range o.records {
		fn(rec.probe)
	}
}

// Limiter is the limiter whose Slots the records keep; nil: none.
func (o *Owner) Limiter() *fairness.Limiter { return o.cfg.Limiter }

// find returns the named cluster's record, taking the gateway's creation
// step when the cluster has none yet (the store's events run behind its
// cache); nil when there is none after it.
func (o *Owner) find(name string) *record {
	for range 2 {
		if rec := o.lookup(name); rec != nil {
			return rec
		}
		if !o.sync(name) {
			break
		}
	}
	return nil
}

// Len is how many clusters have a record.
func (o *Owner) Len() int {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return len(o.records)
}

// changed is the store's event for one gateway: one step of its record.
func (o *Owner) changed(old, new *gateways.Gateway) {
	if new == nil {
		o.deleted(old)
		return
	}
	o.sync(new.Name())
}

// sync is the step of a created or changed gateway: its record takes the
// gateway as the store has it now, resolved against its credential's source
// as that is now (events from credential sources and providers may come
// late or out of order; the store's versions are the latest), and the
// pool, the prober and the followers are told what changed since the
// record's last step. It makes the record when there is none, and tells
// whether there is one after it.
func (o *Owner) sync(name string) bool {
	stored, err := o.cfg.Store.Stored(name)
	if err != nil {
		return false // gone: its deletion step comes, or has come
	}
	// Read before the record's lock: a provider tells its news (a step)
	// holding none of its own.
	in := o.inputsOf(stored)
	o.mu.Lock()
	rec, ok := o.records[name]
	if !ok {
		// Locked before anyone can find it: a lease never sees a record
		// without its gateway.
		rec = &record{probe: health.NewState(1 + len(stored.Conn.Endpoint.AdditionalAddresses))}
		if o.cfg.Limiter != nil {
			rec.slots = o.cfg.Limiter.NewSlots(name)
		}
		rec.mu.Lock()
		o.records[name] = rec
	}
	followers := o.followers
	o.mu.Unlock()
	if ok {
		rec.mu.Lock()
	}
	defer rec.mu.Unlock()
	if rec.gone {
		return false // deleted since: a creation makes a new record
	}
	now := o.cfg.Store.Now()
	if rec.base == nil || rec.in != in {
		base, reason := o.resolve(in, now)
		o.count(rec.in, in, reason)
		rec.in, rec.base = in, base
	}
	g := rec.base.At(now)
	prev := rec.gw
	if prev == g {
		return true
	}
	rec.gw = g
	t, err := o.buildTarget(g)
	rec.target.Store(t)
	rec.targetErr = err
	pl := o.cfg.Pool
	switch {
	case prev == nil:
	case !g.Ready && prev.Ready:
		pl.Remove(name, pool.ReasonUnusable)
	case !gateways.SameTransport(prev, g):
		pl.Remove(name, pool.ReasonRotated)
	}
	switch {
	case prev == nil, prev.Ready != g.Ready, !gateways.SameTransport(prev, g):
		rec.probe.Reset(1 + len(g.Conn.Endpoint.AdditionalAddresses)) // reached differently: what was known no longer holds
		o.tellProber(name, true)
	case prev.Conn.Token != g.Conn.Token:
		o.tellProber(name, false) // a new token may fix what the old one could not
	}
	for _, fn := range followers {
		fn(prev, g)
	}
	// Deleted between the read above and now, its deletion step may have
	// found no record: this step ends it.
	if _, err := o.cfg.Store.Stored(name); apierrors.IsNotFound(err) {
		o.mu.Lock()
		if o.records[name] == rec {
			delete(o.records, name)
		}
		o.mu.Unlock()
		o.endLocked(name, rec, followers)
		return false
	}
	return true
}

// deleted is the deletion step: the record is gone before its lock is
// released, and no lease is taken through it after.
func (o *Owner) deleted(old *gateways.Gateway) {
	name := old.Name()
	o.mu.Lock()
	rec, ok := o.records[name]
	delete(o.records, name)
	followers := o.followers
	o.mu.Unlock()
	if !ok {
		return
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if !rec.gone {
		o.endLocked(name, rec, followers)
	}
}

// endLocked ends rec, which is out of the map: its probe state stops, and
// the pool, the providers and the followers let the cluster go.
func (o *Owner) endLocked(name string, rec *record, followers []func(old, new *gateways.Gateway)) {
	rec.gone = true
	o.cfg.Pool.Remove(name, pool.ReasonDeleted)
	rec.probe.Stop()
	if p := o.cfg.Providers; p != nil {
		p.Release(name)
	}
	for _, fn := range followers {
		fn(rec.gw, nil)
	}
}

// Get returns the named gateway as it is now, its credential resolved, or
// a NotFound error.
func (o *Owner) Get(name string) (*gateways.Gateway, error) {
	g, err := o.cfg.Store.Stored(name)
	if err != nil {
		return nil, err
	}
	return o.Resolve(g), nil
}

// Resolve returns g, a gateway as stored, with its credential resolved as
// of now: its record's when the record holds g resolved against its source
// as that is now. When the record has not taken g's step yet (the store's
// events run behind its cache), it takes it now; a version that is not the
// store's (a write's result, a read from the hub) is resolved for its
// reader alone.
func (o *Owner) Resolve(g *gateways.Gateway) *gateways.Gateway {
	if !g.HasSource() {
		return g.At(o.cfg.Store.Now())
	}
	r, _ := o.resolveWith(g, o.lookup(g.Name()))
	return r
}

// resolveWith returns g resolved as of now (Resolve), starting from rec,
// the record of g's cluster as it was found (nil: none), and the record
// found last on the way (nil: none).
func (o *Owner) resolveWith(g *gateways.Gateway, rec *record) (*gateways.Gateway, *record) {
	now := o.cfg.Store.Now()
	if !g.HasSource() {
		return g.At(now), rec
	}
	in := o.inputsOf(g)
	for range 2 {
		if r := rec.resolved(in); r != nil {
			return r.At(now), rec
		}
		if cur, err := o.cfg.Store.Stored(g.Name()); err != nil || cur != g || !o.sync(g.Name()) {
			break
		}
		rec = o.lookup(g.Name())
	}
	r, _ := o.resolve(in, now)
	return r, rec
}

// lookup returns the named cluster's record; nil when it has none.
func (o *Owner) lookup(name string) *record {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.records[name]
}

// resolved returns the record's gateway resolved from in; nil when rec is
// nil, gone, or holds another resolution, or none.
func (rec *record) resolved(in inputs) *gateways.Gateway {
	if rec == nil {
		return nil
	}
	rec.mu.RLock()
	defer rec.mu.RUnlock()
	if rec.gone || rec.in != in {
		return nil
	}
	return rec.base
}

// leaseFrom leases the pooled transport of the cluster of gw, a version of
// the gateway a request read (Handle.Lease), through rec when rec (the
// record the request took, nil: none) is not gone; else through the record
// the map holds now. It returns the lease and the gateway the lease is for:
// gw, or the record's current version when that reaches the cluster
// differently or is no longer usable. A gateway deleted since is NotFound,
// as the store answers, and leaves nothing in the pool.
func (o *Owner) leaseFrom(rec *record, gw *gateways.Gateway) (*pool.Lease, *gateways.Gateway, error) {
	if rec != nil {
		rec.mu.RLock()
		if !rec.gone {
			defer rec.mu.RUnlock()
			return o.leaseLocked(rec, gw)
		}
		rec.mu.RUnlock()
	}
	name := gw.Name()
	// A deleted record may have been replaced by a new gateway of the same
	// name meanwhile, or a record made: look once more.
	for range 3 {
		rec := o.lookup(name)
		// The store's handlers run behind its cache: a request may come
		// before the gateway's creation step. It takes that step now.
		if rec == nil && !o.sync(name) {
			break
		}
		if rec == nil {
			continue
		}
		rec.mu.RLock()
		if rec.gone {
			rec.mu.RUnlock()
			continue
		}
		l, cur, err := o.leaseLocked(rec, gw)
		rec.mu.RUnlock()
		return l, cur, err
	}
	return nil, nil, apierrors.NewNotFound(gateways.Resource, name)
}

// leaseLocked is leaseFrom under rec's read lock.
func (o *Owner) leaseLocked(rec *record, gw *gateways.Gateway) (*pool.Lease, *gateways.Gateway, error) {
	// As of now, as the request judged its own: a credential that expired
	// since the record's last step, with no write, is not Ready.
	cur := rec.gw.At(o.cfg.Store.Now())
	if cur != gw && (cur.Ready != gw.Ready || !gateways.SameTransport(cur, gw)) {
		gw = cur // changed on the request's way: it goes as the gateway is now
	}
	if !gw.Ready {
		return nil, gw, apierrors.NewServiceUnavailable(fmt.Sprintf("ClusterGateway %q cannot be used: %s", gw.Name(), gw.Problem))
	}
	if rec.targetErr != nil {
		return nil, gw, rec.targetErr
	}
	l, err := o.cfg.Pool.Acquire(o.currentTarget(rec))
	return l, gw, err
}

// currentTarget is rec's target with the tunnel's ID as it is now: a new
// ID (its credentials rotated) makes a new target, once.
func (o *Owner) currentTarget(rec *record) *pool.Target {
	t := rec.target.Load()
	if t.Tunnel == nil {
		return t
	}
	if id := o.cfg.Tunnel.ID(); id != t.TunnelID {
		n := *t
		n.TunnelID = id
		rec.target.CompareAndSwap(t, &n)
		return &n
	}
	return t
}

// Target is the pool key of gw (the probe's and the address reports'): the
// record's own when gw is its current version, else one built for gw.
func (o *Owner) Target(gw *gateways.Gateway) (*pool.Target, error) {
	return o.targetFrom(o.lookup(gw.Name()), gw)
}

// targetFrom is Target through rec, the record of gw's cluster as it was
// found (nil: none).
func (o *Owner) targetFrom(rec *record, gw *gateways.Gateway) (*pool.Target, error) {
	if rec != nil {
		rec.mu.RLock()
		defer rec.mu.RUnlock()
		if rec.gw == gw && !rec.gone {
			if rec.targetErr != nil {
				return nil, rec.targetErr
			}
			return o.currentTarget(rec), nil
		}
	}
	return o.buildTarget(gw)
}

// buildTarget is the pool key of gw: what shapes its transport. A gateway
// that is not Ready has none (its requests are refused before a lease).
func (o *Owner) buildTarget(gw *gateways.Gateway) (*pool.Target, error) {
	if !gw.Ready {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("ClusterGateway %q cannot be used: %s", gw.Name(), gw.Problem))
	}
	ep := gw.Conn.Endpoint
	t := &pool.Target{
		Cluster:    gw.Name(),
		Address:    gw.Address,
		Additional: gw.AdditionalAddresses,
		CAData:     ep.CABundle,
		ServerName: ep.ServerName,
		Insecure:   ep.InsecureSkipTLSVerify,
		ProxyURL:   gw.ProxyURL,
		CertData:   gw.Conn.Cert,
		KeyData:    gw.Conn.Key,
	}
	if ep.Type == v1alpha1.EndpointKonnectivity {
		if o.cfg.Tunnel == nil {
			return nil, apierrors.NewServiceUnavailable(fmt.Sprintf(
				"ClusterGateway %q is reached through konnectivity, but this gateway has no proxy-server configured: start it with --konnectivity-server-address", gw.Name()))
		}
		t.Tunnel = o.cfg.Tunnel
		t.TunnelID = o.cfg.Tunnel.ID()
	}
	return t, nil
}
