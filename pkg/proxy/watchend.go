package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"

	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"
)

// isWatch tells whether the inner request (nil: unparsable) is a watch on the managed cluster.
func isWatch(in *apirequest.RequestInfo) bool {
	return in != nil && in.Verb == "watch"
}

// cleanEnd ends a watch whose upstream connection is cut (a retired
// transport or tunnel after its grace period, a lost tunnel) the way a
// managed cluster ends a watch at its timeout: the response simply ends, and
// clients re-watch from their last resourceVersion. Otherwise the reverse
// proxy aborts the response, the hub resets the stream, and client-go reports
// a 500 "unable to decode an event from the watch stream". Watch events are
// self-delimiting, so a client never mistakes a cut event for a whole one.
// On shutdown the gateway ends its watches the same way (see Drain).
type cleanEnd struct {
	http.RoundTripper
	streams *streams
}

func (c cleanEnd) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.RoundTripper.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusOK {
		b := &eofOnCut{ReadCloser: resp.Body, ctx: req.Context()}
		if c.streams != nil {
			b.untrack = c.streams.addWatch(resp.Body)
		}
		resp.Body = b
	}
	return resp, err
}

type eofOnCut struct {
	io.ReadCloser
	ctx     context.Context
	untrack func()
}

func (b *eofOnCut) Close() error {
	if b.untrack != nil {
		b.untrack()
	}
	return b.ReadCloser.Close()
}

func (b *eofOnCut) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	// A gone client keeps its error: nobody is listening to a clean end.
	if err != nil && !errors.Is(err, io.EOF) && b.ctx.Err() == nil {
		klog.V(2).InfoS("Upstream watch connection was cut; ending the watch cleanly", "err", err)
		return n, io.EOF
	}
	return n, err
}
