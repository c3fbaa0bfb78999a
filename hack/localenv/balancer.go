package localenv

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/clustergateway/cluster-gateway/internal/testbalancer"
)

// Balancer stands in front of gateway replicas as a Service does in a
// cluster: it forwards each TCP connection to a ready replica (round robin),
// and stops sending new connections to one whose /readyz fails (as endpoints
// drop a pod that is not ready). Connections already made stay where they
// are, as with kube-proxy. It listens on 127.0.0.1 and runs in this process.
type Balancer struct {
	Port int

	lb     *testbalancer.Balancer
	ready  []atomic.Bool // per replica, from its /readyz
	stop   context.CancelFunc
	checks sync.WaitGroup
}

// StartBalancer balances over the replicas; Close stops it.
func (e *Env) StartBalancer(replicas ...*Gateway) (*Balancer, error) {
	var addrs []string
	for _, g := range replicas {
		addrs = append(addrs, hostPort("127.0.0.1", g.Port))
	}
	lb, err := testbalancer.Listen("127.0.0.1", addrs...)
	if err != nil {
		return nil, err
	}
	client, err := mtlsClient(e.Gateway.CA.CertPEM, e.Hub.Admin)
	if err != nil {
		lb.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Balancer{Port: lb.Port(), lb: lb, ready: make([]atomic.Bool, len(replicas)), stop: cancel}
	lb.Ready = func(i int) bool { return b.ready[i].Load() }
	for i, g := range replicas {
		b.checks.Go(func() { b.check(ctx, client, g, &b.ready[i]) })
	}
	lb.Start()
	return b, nil
}

// check polls a replica's /readyz, as a readiness probe does.
func (b *Balancer) check(ctx context.Context, client *http.Client, g *Gateway, ready *atomic.Bool) {
	defer client.CloseIdleConnections()
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		ready.Store(httpOK(cctx, client, g.URL+"/readyz") == nil)
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Close stops listening, cuts the connections it carries and waits for its goroutines.
func (b *Balancer) Close() {
	b.stop()
	b.lb.Close()
	b.checks.Wait()
}
