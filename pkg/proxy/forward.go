package proxy

import (
	"context"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
)

// flushInterval 0: httputil.ReverseProxy flushes responses of unknown
// length (watches, logs -f, chunked lists) after every write regardless,
// and a response of known length is complete soon; a periodic flush
// (UpgradeAwareHandler's 200 ms) would cost a timer and a writer per request
// for nothing.
const flushInterval = 0

// forwarded is what an ordinary request carries through the reverse proxy
// that every request shares, as the value of forwardedKey in its context.
type forwarded struct {
	location  url.URL
	up        upstreamTransport
	watch     bool
	streams   *streams
	responder responder
}

type forwardedKey struct{}

// forwardedFrom returns the forwarded that toCluster put in ctx.
func forwardedFrom(ctx context.Context) *forwarded {
	f, _ := ctx.Value(forwardedKey{}).(*forwarded)
	return f
}

// newReverseProxy is built once per Proxy, and once more for watches with
// buffers of their own (newWatchCopyBuffers). It does for ordinary requests
// what UpgradeAwareHandler (which upgrades still go through) does with a
// new httputil.ReverseProxy per request and UseRequestLocation and
// UseLocationHost: the same Director-mode reverse proxy (hop-by-hop headers
// removed, X-Forwarded-For appended), errors to the same responder. Built once, it saves the proxy, its logger and two
// copies of the headers per request.
func newReverseProxy(buffers httputil.BufferPool) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Director: func(out *http.Request) {
			f := forwardedFrom(out.Context())
			out.URL = &f.location
			out.Host = f.location.Host
			// The client's credentials and claimed identities go, and
			// the gateway's identity comes, in the transport
			// (upstreamTransport), after hop-by-hop removal.
			if _, ok := out.Header["User-Agent"]; !ok {
				// As httputil.NewSingleHostReverseProxy: no Go default.
				out.Header["User-Agent"] = []string{""}
			}
		},
		Transport:     forwardTransport{},
		FlushInterval: flushInterval,
		BufferPool:    buffers,
		ErrorLog:      log.New(abortNoise{}, "", 0),
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			forwardedFrom(req.Context()).responder.Error(w, req, err)
		},
	}
}

// forwardTransport is the shared reverse proxy's transport: it hands each
// request to its own upstreamTransport, found in its context.
type forwardTransport struct{}

func (forwardTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	f := forwardedFrom(req.Context())
	// req is the reverse proxy's own copy of the client's request, made for
	// this round trip alone: the identity replaces the client's in place.
	if f.watch {
		return cleanEnd{RoundTripper: ownedRequest{&f.up}, streams: f.streams}.RoundTrip(req)
	}
	return f.up.roundTripOwned(req)
}

// ownedRequest is upstreamTransport.roundTripOwned as a RoundTripper.
type ownedRequest struct{ t *upstreamTransport }

func (o ownedRequest) RoundTrip(req *http.Request) (*http.Response, error) {
	return o.t.roundTripOwned(req)
}

// abortNoise drops what httputil.ReverseProxy logs when a client goes away
// mid-body ("suppressing panic for copyResponse error"), as
// UpgradeAwareHandler does; the request metrics count those requests.
type abortNoise struct{}

func (abortNoise) Write(p []byte) (int, error) { return len(p), nil }
