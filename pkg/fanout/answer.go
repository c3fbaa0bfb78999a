package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// answer is one cluster's answer to one inner request, read as a stream:
// proxy.Serve writes it into a pipe in its own goroutine.
type answer struct {
	code   int
	header http.Header
	body   *io.PipeReader
	done   chan struct{} // closed when Serve has returned
	stop   context.CancelFunc
}

// close ends the answer and waits for Serve to return (its slot given back).
func (a *answer) close() {
	a.body.CloseWithError(errClosed)
	a.stop()
	<-a.done
}

var errClosed = errors.New("the set's request no longer reads this cluster")

// pipeWriter is the response writer Serve writes one cluster's answer to.
type pipeWriter struct {
	header  http.Header
	code    int
	once    sync.Once
	started chan struct{} // closed once the status is known (or Serve returned)
	pw      *io.PipeWriter
	gone    chan bool
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) WriteHeader(code int) {
	if code < 200 && code != 0 {
		return // informational
	}
	w.once.Do(func() {
		w.code = code
		close(w.started)
	})
}

func (w *pipeWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.pw.Write(b)
}

// Flush: the pipe hands every write over as it is made.
func (w *pipeWriter) Flush() {}

// CloseNotify is never signalled: the request's context ends Serve.
func (w *pipeWriter) CloseNotify() <-chan bool { return w.gone }

// open sends req (with rawQuery and accept) to cluster through Serve. It
// returns once the cluster's status is known, within timeout (0: the
// request's deadline) of the start; an answer that does not start in time
// ends Serve and is a 0 code. The caller closes the answer.
func (f *FanOut) open(ctx context.Context, req *http.Request, cluster, subpath, rawQuery, accept string, timeout time.Duration) *answer {
	ctx, cancel := context.WithCancel(ctx)
	var timer *time.Timer
	if timeout > 0 {
		timer = time.AfterFunc(timeout, cancel)
	}
	pr, pw := io.Pipe()
	w := &pipeWriter{header: make(http.Header), started: make(chan struct{}), pw: pw, gone: make(chan bool)}
	// The cluster's audit context is auditedServe's (audit.go): the set's
	// event records the clusters (AuditClusters).
	inner := req.Clone(ctx)
	inner.URL.RawQuery = rawQuery
	inner.Header.Set("Accept", accept)
	inner.Header.Del("Accept-Encoding") // the fan-out reads the body
	inner.Body, inner.ContentLength = http.NoBody, 0
	a := &answer{body: pr, done: make(chan struct{}), stop: cancel}
	go func() {
		defer close(a.done)
		defer func() {
			// The reverse proxy aborts with http.ErrAbortHandler when its
			// writes fail (the fan-out stopped reading); the server's own
			// recovery is not around this goroutine, so it is here. Any
			// other panic ends this cluster's answer, not the gateway.
			if r := recover(); r != nil {
				if r != http.ErrAbortHandler { //nolint:errorlint // the sentinel itself is what is panicked
					utilruntime.HandleError(fmt.Errorf("serving cluster %q of a set: panic: %v\n%s", cluster, r, debug.Stack()))
				}
				pw.CloseWithError(fmt.Errorf("the cluster's answer was cut"))
			}
			w.WriteHeader(0)
			pw.Close()
		}()
		f.opts.Serve(w, inner, cluster, subpath)
	}()
	<-w.started
	if timer != nil {
		timer.Stop() // it bounds the start only; a body cut by it fails as it is read
	}
	a.code, a.header = w.code, w.header
	return a
}

// failure reads a refused answer's Status message (bounded).
func (a *answer) failure(timeout time.Duration) (msg string, status *metav1.Status) {
	if a.code == 0 {
		return timedOut(timeout), nil
	}
	b, _ := io.ReadAll(io.LimitReader(a.body, 64<<10))
	var s metav1.Status
	if json.Unmarshal(b, &s) == nil && s.Kind == "Status" {
		return fmt.Sprintf("%d %s: %s", a.code, s.Reason, s.Message), &s
	}
	return fmt.Sprintf("%d %s: %s", a.code, http.StatusText(a.code), strings.TrimSpace(string(b))), nil
}

func timedOut(timeout time.Duration) string {
	return fmt.Sprintf("no answer within %v (the gateway's --fanout-cluster-timeout): its items are missing from this answer", timeout)
}
