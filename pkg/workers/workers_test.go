package workers

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
)

// A worker that has just answered may not be waiting again yet, and a
// request then runs on its own goroutine, as it should; so these tests ask
// until a request lands on a worker where they need one there.

// onWorker reports whether the calling goroutine is one of a pool's workers.
func onWorker() bool {
	buf := make([]byte, 64<<10)
	return strings.Contains(string(buf[:runtime.Stack(buf, false)]), "workers.(*Pool).run")
}

// where answers whether it ran on a worker: 200 on a worker, 203 not.
var where = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if onWorker() {
		w.WriteHeader(http.StatusOK)
		return
	}
	w.WriteHeader(http.StatusNonAuthoritativeInfo)
})

func serve(h http.Handler, path string) int {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code
}

// eventually calls try until it reports true, for at most 10s.
func eventually(t *testing.T, what string, try func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !try(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("10s and still not: %s", what)
		}
	}
}

func TestRequestsRunOnIdleWorkers(t *testing.T) {
	p := New(4)
	var onWorkers, inline int64
	count := func(code int) int {
		if code == http.StatusOK {
			onWorkers++
		} else {
			inline++
		}
		return code
	}
	h := p.Handler(where, nil)
	for range 5 {
		if code := count(serve(h, "/")); code != http.StatusNonAuthoritativeInfo {
			t.Fatalf("before Start: %d, want 203 (not on a worker)", code)
		}
	}
	p.Start(context.Background())
	eventually(t, "a request served on a worker", func() bool { return count(serve(h, "/")) == http.StatusOK })
	p.Stop()
	for range 5 {
		if code := count(serve(h, "/")); code != http.StatusNonAuthoritativeInfo {
			t.Fatalf("after Stop: %d, want 203 (not on a worker)", code)
		}
	}
	if served, notServed := p.Stats(); served != onWorkers || notServed != inline {
		t.Fatalf("counted %d served on workers and %d inline, want %d and %d", served, notServed, onWorkers, inline)
	}
	reg := metrics.NewKubeRegistry()
	reg.CustomMustRegister(p.Collector())
	want := fmt.Sprintf(`# HELP cluster_gateway_request_workers_inline_total [ALPHA] Ordinary requests that found no request worker idle and were served on their own goroutine (as with --request-workers=0).
# TYPE cluster_gateway_request_workers_inline_total counter
cluster_gateway_request_workers_inline_total %d
# HELP cluster_gateway_request_workers_served_total [ALPHA] Ordinary requests served on a request worker.
# TYPE cluster_gateway_request_workers_served_total counter
cluster_gateway_request_workers_served_total %d
# HELP cluster_gateway_request_workers_size [ALPHA] Request workers (--request-workers).
# TYPE cluster_gateway_request_workers_size gauge
cluster_gateway_request_workers_size 4
`, inline, onWorkers)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}

func TestRequestsTheHintRefusesRunOnTheirOwnGoroutine(t *testing.T) {
	p := New(4)
	p.Start(context.Background())
	defer p.Stop()
	h := p.Handler(where, func(r *http.Request) bool { return r.URL.Path == "/short" })
	eventually(t, "a request the hint takes served on a worker", func() bool { return serve(h, "/short") == http.StatusOK })
	for range 20 {
		if code := serve(h, "/watch"); code != http.StatusNonAuthoritativeInfo {
			t.Fatalf("a request the hint refuses: %d, want 203 (not on a worker)", code)
		}
	}
}

// blockOnWorker serves /block on a worker of h and leaves it blocked there
// until release is closed; done is closed when that request has returned.
func blockOnWorker(t *testing.T, h http.Handler, blocked <-chan struct{}) (done chan struct{}) {
	t.Helper()
	eventually(t, "a /block request on a worker", func() bool {
		done = make(chan struct{})
		code := make(chan int, 1)
		go func() {
			defer close(done)
			code <- serve(h, "/block")
		}()
		select {
		case <-blocked:
			return true
		case <-code:
			return false // ran on its own goroutine: try again
		}
	})
	return done
}

// A request never waits for a worker: with every worker busy it is served
// on its own goroutine at once.
func TestRequestsNeverQueue(t *testing.T) {
	p := New(1)
	p.Start(context.Background())
	defer p.Stop()
	release, blocked := make(chan struct{}), make(chan struct{})
	h := p.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" && onWorker() {
			close(blocked)
			<-release
			return
		}
		where(w, r)
	}), nil)
	done := blockOnWorker(t, h, blocked)
	code := make(chan int, 1)
	go func() { code <- serve(h, "/") }()
	select {
	case c := <-code:
		if c != http.StatusNonAuthoritativeInfo {
			t.Fatalf("served on the only worker while it was busy (%d)", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a request waited for the busy worker")
	}
	close(release)
	<-done
}

// A panic on a worker is raised again on the request's goroutine, with the
// same value (http.ErrAbortHandler is how the reverse proxy aborts a
// response), and the worker goes on serving.
func TestPanicsReachTheRequestsGoroutine(t *testing.T) {
	p := New(1)
	p.Start(context.Background())
	defer p.Stop()
	var panickedOnWorker atomic.Bool
	h := p.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/abort" {
			panickedOnWorker.Store(onWorker())
			panic(http.ErrAbortHandler)
		}
		where(w, r)
	}), nil)
	eventually(t, "a panic on a worker", func() bool {
		got := func() (v any) {
			defer func() { v = recover() }()
			serve(h, "/abort")
			return nil
		}()
		if got != http.ErrAbortHandler {
			t.Fatalf("recovered %v on the request's goroutine, want http.ErrAbortHandler", got)
		}
		return panickedOnWorker.Load()
	})
	eventually(t, "the only worker serving after a panic", func() bool { return serve(h, "/") == http.StatusOK })
}

// runtime.Goexit on a worker (a test's t.FailNow in a handler) ends the
// request's goroutine as it would have without the pool, and another worker
// takes the place of the one that ended.
func TestGoexitEndsTheRequestsGoroutine(t *testing.T) {
	p := New(1)
	p.Start(context.Background())
	var exitedOnWorker atomic.Bool
	h := p.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/exit" {
			exitedOnWorker.Store(onWorker())
			runtime.Goexit()
		}
		where(w, r)
	}), nil)
	eventually(t, "a runtime.Goexit on a worker", func() bool {
		returned := make(chan bool, 1)
		go func() {
			ok := false
			defer func() { returned <- ok }()
			serve(h, "/exit")
			ok = true
		}()
		if <-returned {
			t.Fatal("ServeHTTP returned after the handler called runtime.Goexit")
		}
		return exitedOnWorker.Load()
	})
	eventually(t, "a worker in the place of the one that called runtime.Goexit", func() bool { return serve(h, "/") == http.StatusOK })
	p.Stop() // returns: the replacement holds the same place
}

// A worker gives its place to a fresh goroutine after resetAfter requests,
// so an unusually grown stack is not kept for ever; the pool keeps its size.
func TestWorkersAreRenewed(t *testing.T) {
	p := New(1)
	p.Start(context.Background())
	defer p.Stop()
	h := p.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), nil)
	var w http.ResponseWriter = httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	for range resetAfter + 10 {
		h.ServeHTTP(w, r)
	}
	check := p.Handler(where, nil)
	eventually(t, "a worker serving after resetAfter requests", func() bool { return serve(check, "/") == http.StatusOK })
}

// Workers end when the context Start was given is done, each after its
// request; Stop waits for them (goleak checks that none is left).
func TestWorkersEndWithTheirContext(t *testing.T) {
	p := New(4)
	ctx, cancel := context.WithCancel(context.Background())
	p.Start(ctx)
	release, blocked := make(chan struct{}), make(chan struct{})
	h := p.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if onWorker() {
			close(blocked)
			<-release
		}
	}), nil)
	done := blockOnWorker(t, h, blocked)
	cancel()
	stopped := make(chan struct{})
	go func() { p.Stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Stop returned while a worker was still serving a request")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-done
	<-stopped
}
