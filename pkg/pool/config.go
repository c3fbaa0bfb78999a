package pool

import (
	"fmt"
	"time"

	"github.com/clustergateway/cluster-gateway/pkg/endpointpolicy"
	"github.com/clustergateway/cluster-gateway/pkg/tracing"
)

// Config bounds and times the pool: plain config whose flags are defined
// in cmd/apiserver/app/options. DefaultConfig has the defaults, Validate the
// rules; New refuses what Validate refuses.
type Config struct {
	// Capacity is the most clusters with a live entry at once.
	Capacity int
	// IdleTTL retires an entry unused this long; 0 never does.
	IdleTTL time.Duration
	// IdleConnTimeout closes the idle connections of an entry that no
	// request or health probe used this long; the entry stays pooled and
	// dials again when next used. 0 keeps them until the entry is retired.
	IdleConnTimeout time.Duration
	// RetireGrace is how long live streams of a retired entry (or tunnel)
	// may go on; 0 cuts them at once.
	RetireGrace time.Duration
	// DialTimeout bounds connecting to a cluster: the TCP, proxy or tunnel
	// dial, and the TLS handshake.
	DialTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for a cluster's response headers
	// after the request was sent, for every request, watches and upgrades
	// included: a cluster that accepts the connection and never answers
	// fails the request instead of holding it forever.
	ResponseHeaderTimeout time.Duration
	// MaxConnsPerCluster caps the HTTP/2 connections an entry keeps open
	// to each of its addresses (0: no cap): one address whose connections
	// take no requests cannot use up the places of the others. A healthy cluster needs one for every few hundred
	// requests in flight (net/http opens more in a burst, one per request
	// that finds them full); the cap stops a cluster whose connections take
	// no requests from making the gateway open them without end (dialGuard).
	MaxConnsPerCluster int
	// KeepAlive is the TCP keep-alive period of direct and proxy dials.
	KeepAlive time.Duration
	// HTTP2ReadIdleTimeout and HTTP2PingTimeout: every HTTP/2 connection
	// is pinged this often and dropped if the ping gets no answer in time,
	// so a dead one is found within their sum (see h2health: x/net's own
	// check, which pings only silent connections, keeps closed connections
	// reachable for HTTP2ReadIdleTimeout).
	HTTP2ReadIdleTimeout time.Duration
	HTTP2PingTimeout     time.Duration

	// Endpoints decides which addresses direct and forward-proxy dials may
	// reach (after DNS resolution), and which literal addresses a proxy or a
	// tunnel may be asked for; on every route it refuses hosts written in a
	// form it cannot judge (endpointpolicy's flags and ParseHost). Nil
	// allows all.
	Endpoints *endpointpolicy.Policy

	// Tracer gives each round trip to a cluster a client span (its context
	// goes on in traceparent) and each new connection's dial a span; nil
	// (no --tracing-config-file) traces nothing.
	Tracer *tracing.Tracer
}

// DefaultConfig returns the defaults.
func DefaultConfig() *Config {
	return &Config{
		Capacity:              1000,
		IdleTTL:               30 * time.Minute,
		MaxConnsPerCluster:    256,
		IdleConnTimeout:       90 * time.Second, // client-go's
		RetireGrace:           5 * time.Minute,
		DialTimeout:           10 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		KeepAlive:             30 * time.Second,
		HTTP2ReadIdleTimeout:  30 * time.Second,
		HTTP2PingTimeout:      15 * time.Second,
	}
}

// Validate refuses values the pool cannot work with.
func (c *Config) Validate() []error {
	var errs []error
	if c.Capacity < 1 {
		errs = append(errs, fmt.Errorf("--pool-capacity must be at least 1, not %d", c.Capacity))
	}
	if c.MaxConnsPerCluster < 0 {
		errs = append(errs, fmt.Errorf("--pool-max-connections-per-cluster must not be negative, not %d", c.MaxConnsPerCluster))
	}
	for _, d := range []struct {
		flag   string
		v      time.Duration
		zeroOK bool // 0 has a meaning (never, at once)
	}{
		{"--pool-idle-ttl", c.IdleTTL, true},
		{"the idle connection timeout", c.IdleConnTimeout, true},
		{"--retire-grace-period", c.RetireGrace, true},
		{"--dial-timeout", c.DialTimeout, false},
		{"--upstream-response-header-timeout", c.ResponseHeaderTimeout, false},
		{"the TCP keep-alive period", c.KeepAlive, false},
		{"the HTTP/2 read-idle timeout", c.HTTP2ReadIdleTimeout, false},
		{"the HTTP/2 ping timeout", c.HTTP2PingTimeout, false},
	} {
		switch {
		case d.v < 0:
			errs = append(errs, fmt.Errorf("%s must not be negative, not %v", d.flag, d.v))
		case d.v == 0 && !d.zeroOK:
			errs = append(errs, fmt.Errorf("%s must be positive", d.flag))
		}
	}
	return errs
}
