package proxy

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/clustergateway/cluster-gateway/pkg/pool"
)

// acquire leases the pooled transport of a target. A gateway deleted while
// the request was on its way (read from the store before the deletion) may
// have had its entry retired before this Acquire built a new one, which
// nothing would retire until it idled out: it is retired now, and this
// lease goes on on the retiring entry, as one taken before the deletion
// would.
func (p *Proxy) acquire(lease *pool.Lease, t *pool.Target) error {
	if err := p.opts.Pool.AcquireInto(lease, t); err != nil {
		return err
	}
	// The store drops a gateway before it tells the pool (OnChange), so
	// either the deletion's Remove comes after this Acquire, or this Get
	// sees the gateway gone. An entry that was pooled already was in the
	// pool when any Remove came: that Remove retired it, or comes later.
	if !lease.Created() {
		return nil
	}
	if _, err := p.opts.Store.Get(t.Cluster); apierrors.IsNotFound(err) {
		p.opts.Pool.Remove(t.Cluster, pool.ReasonDeleted)
	}
	return nil
}
