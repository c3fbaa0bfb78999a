package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
)

// A client, not only a cluster, can hold what an ordinary request takes (its
// cluster slot, the generic server's in-flight slot) for as long as it
// likes: by not reading the answer (an HTTP/2 window of 0 blocks the
// reverse proxy in Write, which no context ends), or by sending its body a
// byte at a time. The two bounds below end both by the request's deadline.

// writeGrace is how long an answer begun after an ordinary request's
// deadline (its 504) may take to be written. The cluster's slot is given
// back before the 504 is written, so this bounds only the generic server's
// in-flight slot. A second was too short: a saturated gateway that answers
// a burst of requests expiring together (200 at once in
// TestRequestTimeoutIsAlways504, under -race on 2 busy cores) needs longer
// to write them all, and a 504 cut by its deadline reaches the client as a
// reset stream.
const writeGrace = 5 * time.Second

// writeBound ends the writes of an ordinary request's answer at its
// deadline, whatever the client does. An answer begun before the deadline
// gets the deadline itself as its write deadline, so it is cut then (the
// cluster's side of it ends then too); one begun afterwards (the 504) gets
// writeGrace. A write the client does not take by then fails: net/http
// resets the HTTP/2 stream (or ends the HTTP/1.1 connection), the handler
// returns, and its slots are given back. A write deadline belongs to the
// stream (HTTP/2), or to the connection until net/http clears it once the
// request is finished (HTTP/1.1), so nothing needs undoing at the end.
type writeBound struct {
	rc       *http.ResponseController
	deadline time.Time
}

// start bounds w's writes by ctx's deadline: w is the writer below the
// request recorder. Without a deadline nothing is bounded.
func (b *writeBound) start(w http.ResponseWriter, ctx context.Context) {
	if d, ok := ctx.Deadline(); ok {
		b.rc, b.deadline = http.NewResponseController(w), d
	}
}

// begin is called as the answer begins.
func (b *writeBound) begin() {
	if b == nil || b.rc == nil {
		return
	}
	d := b.deadline
	if now := time.Now(); !now.Before(d) {
		d = now.Add(writeGrace)
	}
	if err := b.rc.SetWriteDeadline(d); err != nil {
		klog.V(2).InfoS("Cannot bound the writes of a proxied request", "err", err)
	}
}

// errBodyNotArrived is a request body that did not arrive by the deadline.
var errBodyNotArrived = errors.New("the request's body did not arrive within its deadline")

// readBody reads an ordinary request's body, up to max bytes, before the
// request takes one of its cluster's slots, so that a body that trickles in
// holds none: kube-apiserver reads a request's whole body before it acts
// on it anyway, and refuses bodies over 3 MiB, the generic server's
// default max. The read ends at the request's deadline. A longer body is
// sent on as it comes after the part read. It returns the request to
// proxy, or the Status to answer (nil: the client went away).
func readBody(w http.ResponseWriter, req *http.Request, max int64) (*http.Request, error) {
	if max <= 0 || req.Body == nil || req.Body == http.NoBody || req.ContentLength == 0 {
		return req, nil
	}
	if deadline, ok := req.Context().Deadline(); ok {
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(deadline); err != nil {
			klog.V(2).InfoS("Cannot bound the body read of a proxied request; it is sent on as it comes", "err", err)
			return req, nil
		}
		defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
	}
	size := max + 1
	if req.ContentLength > 0 && req.ContentLength < size {
		size = req.ContentLength
	}
	var buf bytes.Buffer
	buf.Grow(int(size))
	_, err := buf.ReadFrom(io.LimitReader(req.Body, max+1))
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, apierrors.NewTimeoutError(fmt.Sprintf("%v (%d bytes came); the gateway reads a body before it takes one of the cluster's slots", errBodyNotArrived, buf.Len()), 0)
	case err != nil:
		if req.Context().Err() != nil {
			return nil, nil
		}
		return nil, apierrors.NewBadRequest(fmt.Sprintf("reading the request's body: %v", err))
	}
	out := req.WithContext(req.Context())
	if int64(buf.Len()) > max {
		// Longer than any body a cluster takes by default: the rest goes
		// on as it comes, with the slot taken.
		out.Body = readCloser{io.MultiReader(bytes.NewReader(buf.Bytes()), req.Body), req.Body}
		return out, nil
	}
	out.Body = io.NopCloser(bytes.NewReader(buf.Bytes()))
	out.ContentLength, out.TransferEncoding = int64(buf.Len()), nil
	return out, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}
