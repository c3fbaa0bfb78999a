package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

// memoRequest is req as the handler chain's outermost filter (pkg/apiserver)
// hands it on: with its memo.
func memoRequest(t *testing.T, method, target string) *http.Request {
	t.Helper()
	r := httptest.NewRequest(method, target, nil)
	return r.WithContext(context.WithValue(r.Context(), InnerMemoKey, new(InnerMemo)))
}

type otherKey struct{}

// Within one request the inner request is parsed once: every IsLongRunning
// of the chain, on the request as each filter passes it on (a derived
// context), and the proxy handler get that one parse.
func TestInnerParsedOncePerRequest(t *testing.T) {
	req := memoRequest(t, "GET", proxyPrefix+"/api/v1/namespaces/default/pods?watch=true")
	ri, err := hubRequestInfo.NewRequestInfo(req)
	if err != nil {
		t.Fatal(err)
	}
	first := parseInner(req, ri, innerPath(ri))
	if first.kind != kindStream || first.in == nil || first.in.Verb != "watch" {
		t.Fatalf("the watch was parsed as kind %q, inner %+v", first.kind, first.in)
	}
	later := req.WithContext(context.WithValue(req.Context(), otherKey{}, 1))
	if !IsLongRunning(later, ri) {
		t.Fatal("IsLongRunning of the memoized watch is false")
	}
	if again := parseInner(later, ri, innerPath(ri)); again != first {
		t.Fatal("a filter further in parsed the inner request again")
	}
	if h := parseInner(later, nil, "/api/v1/namespaces/default/pods"); h != first {
		t.Fatal("the proxy handler parsed the inner request again")
	}
}

// The memo answers only for the request it was made from: another query,
// method, path or
// RequestInfo is parsed afresh, and a request without a memo is parsed each
// time, with the same answers.
func TestInnerMemoOnlyForTheSameRequest(t *testing.T) {
	req := memoRequest(t, "GET", proxyPrefix+"/api/v1/namespaces/default/pods?watch=true")
	ri, err := hubRequestInfo.NewRequestInfo(req)
	if err != nil {
		t.Fatal(err)
	}
	first := parseInner(req, ri, innerPath(ri))

	other := req.Clone(req.Context())
	other.URL.RawQuery = "watch=false"
	if p := parseInner(other, ri, innerPath(ri)); p == first || p.kind != kindRequest {
		t.Fatalf("another query reused the memo (same %v) or was parsed as kind %q", p == first, p.kind)
	}
	post := req.Clone(req.Context())
	post.Method = "POST"
	if p := parseInner(post, ri, innerPath(ri)); p == first || p.in.Verb != "create" {
		t.Fatalf("another method reused the memo (same %v) or was parsed as verb %q", p == first, p.in.Verb)
	}
	if p := parseInner(req, ri, "/api/v1/namespaces/default/pods/demo/log"); p == first || p.in.Subresource != "log" {
		t.Fatalf("another path reused the memo (same %v) or was parsed as %+v", p == first, p.in)
	}
	ri2 := *ri
	if p := parseInner(req, &ri2, innerPath(ri)); p == first {
		t.Fatal("another RequestInfo reused the memo")
	}

	bare := httptest.NewRequest("GET", proxyPrefix+"/api/v1/namespaces/default/pods?watch=true", nil)
	a, b := parseInner(bare, ri, innerPath(ri)), parseInner(bare, ri, innerPath(ri))
	if a == b || a.kind != kindStream || b.kind != kindStream {
		t.Fatalf("without a memo: shared %v, kinds %q and %q", a == b, a.kind, b.kind)
	}
}
