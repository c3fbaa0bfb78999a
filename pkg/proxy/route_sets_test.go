package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	apirequest "k8s.io/apiserver/pkg/endpoints/request"
)

type setRecorder struct{ set, subpath string }

func (s *setRecorder) Serve(w http.ResponseWriter, _ *http.Request, set, subpath string) {
	s.set, s.subpath = set, subpath
	w.WriteHeader(http.StatusAccepted)
}

// The proxy subresource of clustersets goes to the set server, with the
// set's name and the subpath as for one cluster, whatever the method (the
// set server refuses writes itself); before ServeSets, and for every other
// resource, the route goes on as before.
func TestRouteServesSets(t *testing.T) {
	var route Route
	fallback := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ri, err := hubRequestInfo.NewRequestInfo(r)
		if err != nil {
			t.Fatal(err)
		}
		route.Handler(fallback).ServeHTTP(w, r.WithContext(apirequest.WithRequestInfo(r.Context(), ri)))
	})
	do := func(method, target string) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
		_, _ = io.Copy(io.Discard, rec.Body)
		return rec.Code
	}
	const sets = "/apis/gateway.clustergateway.io/v1alpha1/clustersets/"
	if code := do("GET", sets+"names:a,b/proxy/api/v1/pods"); code != http.StatusTeapot {
		t.Fatalf("before ServeSets: %d, want the next handler", code)
	}
	rec := new(setRecorder)
	route.ServeSets(rec)
	for _, m := range []string{"GET", "POST", "DELETE"} {
		if code := do(m, sets+"labels:env=prod/proxy/api/v1/pods/"); code != http.StatusAccepted || rec.set != "labels:env=prod" || rec.subpath != "/api/v1/pods/" {
			t.Errorf("%s: %d set %q subpath %q, want the set server with labels:env=prod and /api/v1/pods/", m, code, rec.set, rec.subpath)
		}
	}
	for _, path := range []string{sets + "names:a", "/apis/gateway.clustergateway.io/v1alpha1/othersets/x/proxy/api", "/apis/gateway.clustergateway.io/v1alpha1/namespaces/n/clustersets/x/proxy/api"} {
		if code := do("GET", path); code != http.StatusTeapot {
			t.Errorf("%s: %d, want the next handler", path, code)
		}
	}
}
