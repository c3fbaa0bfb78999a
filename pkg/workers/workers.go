// Package workers serves HTTP requests on a bounded set of long-lived
// goroutines whose stacks have already grown.
//
// net/http (HTTP/2 included) runs every request in a new goroutine. Its
// stack starts small and is copied each time it doubles on the way through
// the generic server's filter chain, the reverse proxy and the HTTP/2
// client: 6-12% of the gateway's CPU per proxied request in its profiles
// (runtime.copystack; docs/performance.md). gRPC-Go's NumStreamWorkers does
// the same for the same reason (golang/go#18138).
package workers

import (
	"context"
	"net/http"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"

	"github.com/clustergateway/cluster-gateway/internal/scraped"
)

// resetAfter: a worker hands its place to a fresh goroutine after this many
// requests, so that a stack grown by one unusual request is not kept for
// ever (as gRPC-Go's serverWorkerResetThreshold).
const resetAfter = 1 << 16

// Pool is a set of worker goroutines, none until Start.
type Pool struct {
	size int
	work chan *job
	jobs sync.Pool

	mu     sync.Mutex
	cancel context.CancelFunc // nil until Start
	wg     sync.WaitGroup

	served, inline atomic.Int64 // requests the hint took: on a worker, on their own goroutine
}

type job struct {
	h    http.Handler
	w    http.ResponseWriter
	r    *http.Request
	done chan any // the recovered panic, or nil
}

// goexit is sent back when the handler called runtime.Goexit on a worker.
type goexit struct{}

// New returns a pool of size workers; Start starts them.
func New(size int) *Pool {
	p := &Pool{size: size, work: make(chan *job)}
	p.jobs.New = func() any { return &job{done: make(chan any, 1)} }
	return p
}

// Start starts the workers; they end when ctx is done or on Stop, each
// after its current request.
func (p *Pool) Start(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cancel != nil || p.size == 0 {
		return
	}
	ctx, p.cancel = context.WithCancel(ctx)
	p.wg.Add(p.size)
	for range p.size {
		go p.run(ctx)
	}
}

// Stop ends the workers and returns when they have ended.
func (p *Pool) Stop() {
	p.mu.Lock()
	if p.cancel != nil {
		p.cancel()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// Handler serves next on the workers for the requests that want (nil:
// every request). A request that finds no worker idle (or comes before
// Start or after the end) is served on its own goroutine, as without the
// pool: requests never queue here. A panic on the worker is raised again on
// the request's goroutine, so the filters and the HTTP server outside see
// it as before (e.g. http.ErrAbortHandler, on which the server resets the
// stream).
func (p *Pool) Handler(next http.Handler, want func(*http.Request) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if want != nil && !want(r) {
			next.ServeHTTP(w, r)
			return
		}
		j := p.jobs.Get().(*job)
		j.h, j.w, j.r = next, w, r
		select {
		case p.work <- j:
			p.served.Add(1)
			v := <-j.done
			j.h, j.w, j.r = nil, nil, nil
			p.jobs.Put(j)
			switch v.(type) {
			case nil:
			case goexit:
				runtime.Goexit()
			default:
				panic(v)
			}
		default:
			p.inline.Add(1)
			j.h, j.w, j.r = nil, nil, nil
			p.jobs.Put(j)
			next.ServeHTTP(w, r)
		}
	})
}

func (p *Pool) run(ctx context.Context) {
	for range resetAfter {
		select {
		case j := <-p.work:
			if !p.handle(ctx, j) {
				return // runtime.Goexit: handle started the replacement
			}
		case <-ctx.Done():
			p.wg.Done()
			return
		}
	}
	go p.run(ctx) // the same place in wg, with a fresh stack
}

// handle serves one job and reports whether the worker may go on.
func (p *Pool) handle(ctx context.Context, j *job) (ok bool) {
	returned := false
	defer func() {
		if returned {
			return
		}
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				// The stack is this goroutine's; the request's shows only
				// where the panic is raised again.
				klog.ErrorS(nil, "A request panicked on a worker goroutine; raising it again on the request's own", "panic", v, "stack", string(debug.Stack()))
			}
			j.done <- v
			ok = true
			return
		}
		// runtime.Goexit: this goroutine ends; another takes its place.
		j.done <- goexit{}
		go p.run(ctx)
	}()
	j.h.ServeHTTP(j.w, j.r)
	returned = true
	j.done <- nil
	return true
}

// Stats are the requests the hint took that were served on a worker, and
// those that found none idle and were served on their own goroutine.
func (p *Pool) Stats() (served, inline int64) { return p.served.Load(), p.inline.Load() }

// Collector exposes the pool's size and counters as metrics, read at
// scrape time.
func (p *Pool) Collector() metrics.StableCollector {
	return scraped.Collector("cluster_gateway_request_workers_", []scraped.Metric{
		{Name: "size", Help: "Request workers (--request-workers).", Type: metrics.GaugeValue},
		{Name: "served_total", Help: "Ordinary requests served on a request worker.", Type: metrics.CounterValue},
		{Name: "inline_total", Help: "Ordinary requests that found no request worker idle and were served on their own goroutine (as with --request-workers=0).", Type: metrics.CounterValue},
	}, func() []float64 {
		served, inline := p.Stats()
		return []float64{float64(p.size), float64(served), float64(inline)}
	})
}
