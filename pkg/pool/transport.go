package pool

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"time"

	"golang.org/x/net/http2"
)

// Values client-go uses (k8s.io/apimachinery/pkg/util/net.SetTransportDefaults).
// Its IdleConnTimeout (90s) is the pool's Config.IdleConnTimeout instead:
// the transports' own idle timers are off (see newTransport).
const (
	maxIdleConnsPerHost   = 25
	expectContinueTimeout = 1 * time.Second
)

// MaxResponseHeaderBytes bounds a cluster's response headers, which are held
// and decoded before the first byte is passed on: 1 MiB, a kube-apiserver's
// own bound on request headers, rather than net/http's and x/net's 10 MiB.
const MaxResponseHeaderBytes = 1 << 20

// decoderHeaderTableSize is the HPACK table the pool's connections let a
// cluster fill with response headers (HTTP/2's default is 4096). A
// kube-apiserver indexes every response header, its unique Audit-Id
// included, so on a long-lived connection the default table fills with
// Audit-Ids: 4 KiB as HPACK counts it, more in memory (the entries, their
// strings and two indexes), kept for the connection's life. 1 KiB holds
// the headers that repeat (content type, cache control, the priority-and-
// fairness UIDs) with a few unique ones; those repeating headers are then
// sent anew every few responses: a little decoding traded for memory.
// The encoder's table (request headers, impersonation included) keeps
// the cluster's limit: a user's groups repeat on every request.
const decoderHeaderTableSize = 1024

// newTransport builds an entry's transport for ordinary requests around its
// tracked dialer: HTTP/2 over TLS connections that dialTLS makes (the
// entry's TLS material, see entryTLS). It uses neither http.Transport.Proxy
// (proxies are dialed by dial) nor the environment's proxy settings: the
// upgrade path could not honour them.
//
// Neither this transport nor the upgrade one has an IdleConnTimeout:
// net/http and x/net/http2 arm a timer per idle connection whose function
// holds the connection, and so its transport and the entry, and stop it when
// the connection closes; the runtime may keep a stopped timer, with its
// function, until the timer's time would have come (90s), so every retired
// entry would stay in memory that long. The pool's janitor closes the idle
// connections of unused entries instead (Pool.closeIdleConns).
func newTransport(dialTLS dialFunc, o Config) (rt *http.Transport, h2 *h2health, err error) {
	rt = &http.Transport{
		// Its TLSClientConfig is not used: http.Transport leaves TLS to
		// DialTLSContext. It holds no client certificate.
		DialTLSContext:         dialTLS,
		ResponseHeaderTimeout:  o.ResponseHeaderTimeout,
		MaxResponseHeaderBytes: MaxResponseHeaderBytes,
		MaxIdleConnsPerHost:    maxIdleConnsPerHost,
		ExpectContinueTimeout:  expectContinueTimeout,
		// A proxy passes the client's Accept-Encoding through; transparent
		// gzip would decompress bodies the client asked to get compressed.
		DisableCompression: true,
	}
	t2, err := http2.ConfigureTransports(rt)
	if err != nil {
		return nil, nil, fmt.Errorf("configure HTTP/2: %w", err)
	}
	// Detect dead connections (a silently dropped TCP path would otherwise
	// hang watches for the kernel's 13-30 minutes), as client-go does, but
	// with the entry's own check: x/net's keeps every closed connection
	// reachable for ReadIdleTimeout (see h2health).
	t2.ReadIdleTimeout, t2.PingTimeout = 0, 0
	t2.MaxDecoderHeaderTableSize = decoderHeaderTableSize
	h2 = newH2Health(t2.ConnPool, o.HTTP2ReadIdleTimeout, o.HTTP2PingTimeout)
	t2.ConnPool = h2
	return rt, h2, nil
}

// newUpgradeTransport builds an entry's HTTP/1.1-only transport for
// exec/attach/port-forward, whose UpgradeAwareHandler dials itself with the
// transport's DialContext and TLSClientConfig (so tlsCfg is complete).
func newUpgradeTransport(tlsCfg *tls.Config, dial dialFunc, o Config) *http.Transport {
	http1 := new(http.Protocols)
	http1.SetHTTP1(true)
	return &http.Transport{
		DialContext:            dial,
		TLSClientConfig:        tlsCfg,
		TLSHandshakeTimeout:    o.DialTimeout,
		MaxIdleConnsPerHost:    maxIdleConnsPerHost,
		ExpectContinueTimeout:  expectContinueTimeout,
		MaxResponseHeaderBytes: MaxResponseHeaderBytes,
		DisableCompression:     true,
		Protocols:              http1,
		// A non-nil empty map is the documented way to keep HTTP/2 off.
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
}
