package proxy

import (
	"net/http"
	"sync/atomic"

	apirequest "k8s.io/apiserver/pkg/endpoints/request"
)

// The generic server's handler chain asks IsLongRunning about every request
// in three or four filters (deadline, wait group, in-flight limit, and audit
// when the request is audited), and for a proxied request the answer needs
// the inner request parsed; Serve needs it too. One parse costs 24
// allocations and 2.1 KiB (BenchmarkServePieces/inner-parse; 4-16 µs each
// on the shared 2-core machine of 2026-12-05). The memo saves three or four
// of them per proxied request, 72-96 allocations and 6.5-8.6 KiB, against
// the 182 allocations of a whole in-process GET (BenchmarkProxyGateway): it
// pays. So each request carries one InnerMemo, which the handler chain's
// outermost filter (pkg/apiserver) puts in its context under InnerMemoKey
// with context.WithValue; the first filter that asks parses the inner
// request into it, and the others and Serve reuse that parse.

// InnerMemo holds one request's parse of its inner request.
type InnerMemo struct {
	parsed atomic.Pointer[innerParse]
}

type innerMemoKey struct{}

// InnerMemoKey is the context key of a request's *InnerMemo.
var InnerMemoKey any = innerMemoKey{}

// innerParse is one parse of a proxied request's inner request, immutable
// once stored. It is reused only for the same outer RequestInfo, method,
// inner path and query it was made from.
type innerParse struct {
	outer    *apirequest.RequestInfo
	method   string
	path     string
	rawQuery string
	in       *apirequest.RequestInfo
	err      error
	kind     string
}

func (p *innerParse) matches(r *http.Request, path string) bool {
	return p.method == r.Method && p.path == path && p.rawQuery == r.URL.RawQuery
}

// parseInner returns the parse of r's inner request at path: the request's
// memo's, when this request has parsed it before, else a new one (kept in
// the memo, if the request has one). outer may be nil (Serve does not key
// by it).
func parseInner(r *http.Request, outer *apirequest.RequestInfo, path string) *innerParse {
	m, _ := r.Context().Value(InnerMemoKey).(*InnerMemo)
	if m != nil {
		if p := m.parsed.Load(); p != nil && (outer == nil || p.outer == outer) && p.matches(r, path) {
			return p
		}
	}
	p := &innerParse{outer: outer, method: r.Method, path: path, rawQuery: r.URL.RawQuery}
	p.in, p.err = innerInfo(r, path)
	p.kind = kindOf(r, p.in)
	if m != nil {
		m.parsed.Store(p) // a race stores an equal parse: either is right
	}
	return p
}
