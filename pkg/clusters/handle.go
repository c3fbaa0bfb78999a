package clusters

import (
	"context"

	"github.com/clustergateway/cluster-gateway/pkg/fairness"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
	"github.com/clustergateway/cluster-gateway/pkg/pool"
)

// Handle is one cluster's record as a proxied request or a probe took it
// (Take): the gateway as the request read it, the record's limiter Slots,
// Lease and Target. The hub side takes it once and hands it to the cluster
// side, so a request finds its record once; a probe too, at each of the
// cluster's addresses.
type Handle struct {
	o   *Owner
	rec *record // nil: the cluster had no record when taken
	gw  *gateways.Gateway
}

// Take returns the handle of the named cluster's record for a proxied
// request, with its gateway as GetForRequest returns it (a provider's
// credential from the provider now), or GetForRequest's error. A request
// that comes before the gateway's creation step takes that step.
func (o *Owner) Take(ctx context.Context, name string) (Handle, error) {
	g, err := o.storedForRequest(ctx, name)
	if err != nil {
		return Handle{}, err
	}
	gw, rec := o.resolveWith(g, o.find(name))
	return Handle{o: o, rec: rec, gw: gw}, nil
}

// Gateway returns the gateway as the request read it, its credential
// resolved.
func (h Handle) Gateway() *gateways.Gateway { return h.gw }

// Slots returns the cluster's slots and queues of the Owner's Limiter, the
// record's; nil when the cluster had no record when taken, or no Limiter
// bounds it.
func (h Handle) Slots() *fairness.Slots {
	if h.o.cfg.Limiter == nil {
		return nil
	}
	return h.rec.slotsOf()
}

// Lease leases the pooled transport of the handle's cluster. It returns the
// lease and the gateway the lease is for: the handle's gateway, as the
// request read it, or the record's current version when that reaches the
// cluster differently or is no longer usable. A gateway deleted since is
// NotFound, as the store answers, and leaves nothing in the pool. It leases
// through the record taken unless that record's deletion step has passed;
// then through the record of the gateway created again under the same name,
// if there is one.
func (h Handle) Lease() (*pool.Lease, *gateways.Gateway, error) {
	return h.o.leaseFrom(h.rec, h.gw)
}

// Target is the pool key of the handle's gateway, as Owner.Target returns
// it, through the record taken: the record's own when the gateway is its
// current version, else one built for the gateway.
func (h Handle) Target() (*pool.Target, error) {
	return h.o.targetFrom(h.rec, h.gw)
}

// slotsOf returns rec's slots; nil when rec is nil.
func (rec *record) slotsOf() *fairness.Slots {
	if rec == nil {
		return nil
	}
	return rec.slots
}
