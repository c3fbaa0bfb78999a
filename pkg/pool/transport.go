package pool

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"time"

	"golang.org/x/net/http2"
)

// Values client-go uses (k8s.io/apimachinery/pkg/util/net.SetTransportDefaults).
const (
	maxIdleConnsPerHost   = 25
	idleConnTimeout       = 90 * time.Second
	expectContinueTimeout = 1 * time.Second
)

// newTransports builds the two transports of an entry around one tracked
// dialer. Neither uses http.Transport.Proxy (proxies are dialed by dial) nor
// the environment's proxy settings: the upgrade path could not honour them.
func newTransports(tlsCfg *tls.Config, dial dialFunc, o Options) (rt, upgrade *http.Transport, h2 *h2health, err error) {
	// Clone before http2 configuration appends "h2" to NextProtos.
	h1cfg := tlsCfg.Clone()
	h1cfg.NextProtos = []string{"http/1.1"}

	rt = &http.Transport{
		DialContext:           dial,
		TLSClientConfig:       tlsCfg,
		TLSHandshakeTimeout:   o.DialTimeout,
		ResponseHeaderTimeout: o.ResponseHeaderTimeout,
		MaxIdleConnsPerHost:   maxIdleConnsPerHost,
		IdleConnTimeout:       idleConnTimeout,
		ExpectContinueTimeout: expectContinueTimeout,
		// A proxy passes the client's Accept-Encoding through; transparent
		// gzip would decompress bodies the client asked to get compressed.
		DisableCompression: true,
	}
	t2, err := http2.ConfigureTransports(rt)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("configure HTTP/2: %w", err)
	}
	// Detect dead connections (a silently dropped TCP path would otherwise
	// hang watches for the kernel's 13-30 minutes), as client-go does, but
	// with the entry's own check: x/net's keeps every closed connection
	// reachable for ReadIdleTimeout (see h2health).
	t2.ReadIdleTimeout, t2.PingTimeout = 0, 0
	h2 = newH2Health(t2.ConnPool, o.HTTP2ReadIdleTimeout, o.HTTP2PingTimeout)
	t2.ConnPool = h2

	http1 := new(http.Protocols)
	http1.SetHTTP1(true)
	upgrade = &http.Transport{
		DialContext:           dial,
		TLSClientConfig:       h1cfg,
		TLSHandshakeTimeout:   o.DialTimeout,
		MaxIdleConnsPerHost:   maxIdleConnsPerHost,
		IdleConnTimeout:       idleConnTimeout,
		ExpectContinueTimeout: expectContinueTimeout,
		DisableCompression:    true,
		Protocols:             http1,
		// A non-nil empty map is the documented way to keep HTTP/2 off.
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	return rt, upgrade, h2, nil
}
