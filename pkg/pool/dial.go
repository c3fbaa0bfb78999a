package pool

import (
	"context"
	"net"

	"github.com/clustergateway/cluster-gateway/pkg/endpointpolicy"
)

// rawDialerFor picks how an entry reaches its cluster: through the tunnel,
// through a proxy, or directly. Connections are tracked by the caller.
func (p *Pool) rawDialerFor(t *Target) (dialFunc, error) {
	policy := p.opts.Endpoints
	var dial dialFunc
	switch {
	case t.Tunnel != nil:
		dial = t.Tunnel.DialContext
	default:
		// Control runs on every address the dialer connects to, after DNS
		// resolution: a name that resolves into a denied range is refused too.
		d := &net.Dialer{Timeout: p.opts.DialTimeout, KeepAlive: p.opts.KeepAlive, Control: policy.Control}
		dial = d.DialContext
		if t.ProxyURL != nil {
			var err error
			if dial, err = proxyDialer(t.Cluster, t.ProxyURL, d, policy); err != nil {
				return nil, err
			}
		}
	}
	return judgedDial(policy, dial), nil
}

// judgedDial judges each address as written before dial sees it. Behind a
// forward proxy or a tunnel the proxy or the agent resolves it, with its own
// rules (inet_aton reads 127.1 as 127.0.0.1), so the policy must judge the
// literal here or refuse a host it cannot read as they do (CheckHostPort).
// Directly, it refuses such hosts before the resolver (a cgo one reads them
// as glibc does) gets them; Control still judges what they resolve to.
func judgedDial(policy *endpointpolicy.Policy, dial dialFunc) dialFunc {
	if policy == nil {
		return dial
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if err := policy.CheckHostPort(addr); err != nil {
			return nil, err
		}
		return dial(ctx, network, addr)
	}
}
