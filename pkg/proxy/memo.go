package proxy

import (
	"context"
	"net/http"
	"net/url"
	"sync/atomic"

	apirequest "k8s.io/apiserver/pkg/endpoints/request"
)

// The generic server's handler chain asks IsLongRunning about every request
// in five filters (wait group, deadline, timeout, audit, in-flight limit),
// and for a proxied request the answer needs the inner request parsed: five
// parses, each allocating, per request. WithInnerMemo gives each request one
// memo, so the inner request is parsed once, by the first filter that asks,
// and the proxy handler reuses that parse too.

// WithInnerMemo is the outermost filter of the gateway's handler chain.
func WithInnerMemo(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		next.ServeHTTP(w, req.WithContext(&memoContext{Context: req.Context()}))
	})
}

// memoContext is the request's context with its memo as the value of
// memoKey: one allocation for both.
type memoContext struct {
	context.Context
	parsed atomic.Pointer[innerParse]
}

type memoKey struct{}

func (m *memoContext) Value(key any) any {
	if key == (memoKey{}) {
		return m
	}
	return m.Context.Value(key)
}

// innerParse is one parse of a proxied request's inner request, immutable
// once stored. It is reused only for the same outer RequestInfo, method,
// inner path and query it was made from.
type innerParse struct {
	outer    *apirequest.RequestInfo
	method   string
	path     string
	rawQuery string
	inner    url.URL
	in       *apirequest.RequestInfo
	err      error
	kind     string
}

func (p *innerParse) matches(r *http.Request, path string) bool {
	return p.method == r.Method && p.path == path && p.rawQuery == r.URL.RawQuery
}

// parseInnerOnce is innerInfoAt of r's inner request at path, from the memo
// when this request has parsed it before, else parsed into p (nil: a new
// one). outer may be nil (the handler does not key by it).
func parseInnerOnce(r *http.Request, outer *apirequest.RequestInfo, path string, p *innerParse) *innerParse {
	m, _ := r.Context().Value(memoKey{}).(*memoContext)
	if m != nil {
		if p := m.parsed.Load(); p != nil && (outer == nil || p.outer == outer) && p.matches(r, path) {
			return p
		}
	}
	if p == nil {
		p = new(innerParse)
	}
	*p = innerParse{outer: outer, method: r.Method, path: path, rawQuery: r.URL.RawQuery}
	p.in, p.err = innerInfoAt(r, path, &p.inner)
	if p.err != nil {
		p.in = nil
	}
	p.kind = kindOf(r, p.in)
	if m != nil {
		m.parsed.Store(p) // a race stores an equal parse: either is right
	}
	return p
}
