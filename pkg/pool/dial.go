package pool

import (
	"net"
)

// rawDialerFor picks how an entry reaches its cluster: through the tunnel,
// through a proxy, or directly. Connections are tracked by the caller.
func (p *Pool) rawDialerFor(t *Target) (dialFunc, error) {
	if t.Tunnel != nil {
		return t.Tunnel.DialContext, nil
	}
	// Control runs on every address the dialer connects to, after DNS
	// resolution: a name that resolves into a denied range is refused too.
	d := &net.Dialer{Timeout: p.opts.DialTimeout, KeepAlive: p.opts.KeepAlive, Control: p.opts.Endpoints.Control}
	if t.ProxyURL != nil {
		return proxyDialer(t.Cluster, t.ProxyURL, d)
	}
	return d.DialContext, nil
}
