package proxy

import (
	"context"
	"net/http"

	apirequest "k8s.io/apiserver/pkg/endpoints/request"
)

type rawQueryKey struct{}

// WithDryRunPassthrough lets dryRun through to the managed cluster. The
// generic server refuses dryRun on every connect subresource, so for proxy
// requests the parameter is hidden from it here, innermost in the handler
// chain, and the proxy forwards the query exactly as the client sent it.
func WithDryRunPassthrough(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ri, ok := apirequest.RequestInfoFrom(req.Context())
		if !ok || !isProxy(ri) || req.URL.RawQuery == "" {
			next.ServeHTTP(w, req)
			return
		}
		q := req.URL.Query()
		if _, has := q["dryRun"]; !has {
			next.ServeHTTP(w, req)
			return
		}
		raw := req.URL.RawQuery
		q.Del("dryRun")
		u := *req.URL
		u.RawQuery = q.Encode()
		r2 := req.WithContext(context.WithValue(req.Context(), rawQueryKey{}, raw))
		r2.URL = &u
		next.ServeHTTP(w, r2)
	})
}

// clientQuery is the query the client sent.
func clientQuery(req *http.Request) string {
	if raw, ok := req.Context().Value(rawQueryKey{}).(string); ok {
		return raw
	}
	return req.URL.RawQuery
}
