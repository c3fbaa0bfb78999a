package pool

import (
	"time"

	"github.com/clustergateway/cluster-gateway/pkg/endpointpolicy"
)

// Defaults applied by New to zero Options fields.
const (
	DefaultCapacity             = 1000
	DefaultDialTimeout          = 30 * time.Second
	DefaultKeepAlive            = 30 * time.Second
	DefaultHTTP2ReadIdleTimeout = 30 * time.Second
	DefaultHTTP2PingTimeout     = 15 * time.Second
)

// Options bound the pool. Zero values take the defaults above, except
// IdleTTL (0 = never idle-retire) and RetireGrace (0 = cut live streams of a
// retired entry at once).
type Options struct {
	Capacity    int           // max live entries
	IdleTTL     time.Duration // entries unused this long are retired
	RetireGrace time.Duration // how long live streams of a retired entry may go on
	DialTimeout time.Duration // bounds the TCP/tunnel/proxy dial, and the TLS handshake
	KeepAlive   time.Duration // TCP keep-alive of direct and proxy dials

	// Endpoints decides which addresses direct and forward-proxy dials may
	// reach (after DNS resolution), and which literal addresses a tunnel may
	// be asked for. Nil allows all.
	Endpoints *endpointpolicy.Policy

	// HTTP/2 health check: ping a connection silent this long, drop it if
	// the ping gets no answer within HTTP2PingTimeout.
	HTTP2ReadIdleTimeout time.Duration
	HTTP2PingTimeout     time.Duration
}

func (o Options) withDefaults() Options {
	if o.Capacity <= 0 {
		o.Capacity = DefaultCapacity
	}
	if o.IdleTTL < 0 {
		o.IdleTTL = 0
	}
	if o.RetireGrace < 0 {
		o.RetireGrace = 0
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.KeepAlive <= 0 {
		o.KeepAlive = DefaultKeepAlive
	}
	if o.HTTP2ReadIdleTimeout <= 0 {
		o.HTTP2ReadIdleTimeout = DefaultHTTP2ReadIdleTimeout
	}
	if o.HTTP2PingTimeout <= 0 {
		o.HTTP2PingTimeout = DefaultHTTP2PingTimeout
	}
	return o
}
