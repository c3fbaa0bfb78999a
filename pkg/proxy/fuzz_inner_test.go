package proxy

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/sets"
)

// connectMethods are the methods the proxy subresource serves
// (pkg/registry/clustergateway's ConnectMethods); the server answers any
// other with 405 before the proxy runs.
var connectMethods = []string{"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"}

// innerVerbs are the verbs a RequestInfoFactory gives a resource request:
// those it derives from the method, and its special verbs, which it takes
// from the segment after the version whatever the method (PUT
// /api/v1/proxy/nodes/n is verb "proxy" to the cluster, so to the gateway's
// authorization too).
var innerVerbs = sets.New("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "proxy")

// FuzzInnerPath sends arbitrary proxied paths, queries and methods, plain
// and as upgrades, through the gateway's parsing of the inner request and
// through the whole request path to a recording cluster. Invariants:
//   - nothing panics; kindOf is total (one of request, stream, upgrade, for
//     a parsed inner request and for none), an upgrade is always "upgrade"
//     and a watch never "request";
//   - innerInfo keeps the path it was given, gives resource requests a known
//     verb (none for OPTIONS), and no namespace, name, resource or subresource with a "/";
//   - checkSubpath accepts exactly the paths that path cleaning leaves alone
//     (no empty, "." or ".." segment; one trailing slash allowed);
//   - IsLongRunning, judged by the server's filter on the outer request,
//     agrees with the kind the proxy handles the request as: a request held
//     to the timeout is never handled as a stream, and the other way round;
//   - a refused path never reaches the cluster (400), and every request that
//     does reach it has exactly the path that was judged (the subpath the
//     generic server hands the proxy) and the query as sent.
//
// Fuzz it with: go test -run '^$' -fuzz FuzzInnerPath -fuzztime 1m ./pkg/proxy/
func FuzzInnerPath(f *testing.F) {
	for _, s := range []struct {
		method  uint8
		path    string
		query   string
		upgrade bool
	}{
		{0, "/api/v1/namespaces/default/pods", "watch=1&resourceVersion=0", false},
		{0, "/api/v1/watch/namespaces/default/pods/demo", "", false},
		{0, "/api/v1/namespaces/default/pods/demo/log", "follow=true&container=main", false},
		{0, "/api/v1/namespaces/default/pods/demo/exec", "command=sh&stdin=true", true},
		{1, "/api/v1/namespaces/default/pods/demo/portforward", "ports=80", true},
		{4, "/apis/apps/v1/namespaces/prod/deployments/web/", "dryRun=All", false},
		{0, "/api/v1/namespaces/default/pods/demo/proxy/a/../b", "", false},
		{0, "/api/v1/namespaces/default/../kube-system/secrets", "", false},
		{0, "//api/v1/secrets", "", false},
		{0, "/./version", "", false},
		{0, "", "", false},
		{0, "/", "", false},
		{3, "/api/v1/namespaces/a b/configmaps/%2e%2e", "fieldSelector=metadata.name%3Dx&watch=true", false},
		{6, "/apis", "watch=false", false},
		{0, "/api/v1/namespaces/default/services/https:web:443/proxy/", "", false},
	} {
		f.Add(s.method, s.path, s.query, s.upgrade)
	}
	up := newCapture(f)
	px := newFixtureProxyWith(f, nil, tokenSecret("c", up.srv.URL, upstreamCA(up.srv), "gw-token", "None"))

	f.Fuzz(func(t *testing.T, m uint8, p, rawQuery string, upgrade bool) {
		method := connectMethods[int(m)%len(connectMethods)]
		if _, err := url.ParseRequestURI("/?" + rawQuery); err != nil {
			// Go's server answers 400 to a request line or :path it cannot
			// parse (a control character in the query, say): no handler,
			// the proxy included, ever sees such a query.
			return
		}

		// The outer request, as the gateway's server sees it.
		outer := httptest.NewRequest(http.MethodGet, "/x", nil)
		outer.Method = method
		outer.URL.Path = proxyPrefix + "/" + strings.TrimPrefix(p, "/")
		outer.URL.RawPath = ""
		outer.URL.RawQuery = rawQuery
		if upgrade {
			outer.Header.Set("Connection", "Upgrade")
			outer.Header.Set("Upgrade", "SPDY/3.1")
		}
		ri, err := hubRequestInfo.NewRequestInfo(outer)
		if err != nil {
			return // the server answers an error before any handler
		}
		if !isProxy(ri) || ri.Name != "c1" {
			// A path such as ".../proxy/.." is something else to the server.
			_ = IsLongRunning(outer, ri)
			return
		}
		subpath := connectSubpath(ri)

		in, inErr := innerInfo(outer, "/"+strings.TrimPrefix(subpath, "/"))
		if inErr == nil {
			if in.Path != "/"+strings.TrimPrefix(subpath, "/") {
				t.Fatalf("innerInfo changed the path: %q, given %q", in.Path, subpath)
			}
			if in.IsResourceRequest {
				// OPTIONS has no verb, as on a kube-apiserver.
				if !innerVerbs.Has(in.Verb) && (method != http.MethodOptions || in.Verb != "") {
					t.Fatalf("innerInfo gave resource request %s %q the verb %q", method, subpath, in.Verb)
				}
				for _, v := range []string{in.Namespace, in.Name, in.Resource, in.Subresource} {
					if strings.Contains(v, "/") {
						t.Fatalf("innerInfo of %q: a part with a slash: %+v", subpath, in)
					}
				}
			}
		} else {
			in = nil
		}
		kind := kindOf(outer, in)
		switch {
		case kind != kindRequest && kind != kindStream && kind != kindUpgrade:
			t.Fatalf("kindOf = %q", kind)
		case httpstream.IsUpgradeRequest(outer) && kind != kindUpgrade:
			t.Fatalf("an upgrade is of kind %q", kind)
		case in != nil && in.Verb == "watch" && kind == kindRequest:
			t.Fatalf("a watch is of kind %q", kind)
		}
		if k := kindOf(outer, nil); k != kindRequest && k != kindUpgrade {
			t.Fatalf("kindOf without an inner request = %q", k)
		}
		if long := IsLongRunning(outer, ri); long != (kind != kindRequest) {
			t.Fatalf("%s %s?%s: IsLongRunning %v, but the proxy handles it as %q", method, outer.URL.Path, rawQuery, long, kind)
		}

		trimmed := strings.TrimSuffix(strings.TrimPrefix(subpath, "/"), "/")
		clean := trimmed == "" || path.Clean("/"+trimmed) == "/"+trimmed
		refused := checkSubpath(subpath) != nil
		if refused == clean {
			t.Fatalf("checkSubpath(%q) refused: %v, but path cleaning changes it: %v", subpath, refused, !clean)
		}

		// Through the whole request path.
		req := httptest.NewRequest(http.MethodGet, "/x", nil)
		req.Method, req.URL.RawQuery, req.Header = method, rawQuery, outer.Header.Clone()
		before := len(up.requests())
		rec := serveAs(px, "c", subpath, alice, req)
		got := up.requests()[before:]
		if refused {
			if len(got) != 0 || rec.Code != http.StatusBadRequest {
				t.Fatalf("refused path %q: %d, and %d requests reached the cluster", subpath, rec.Code, len(got))
			}
			return
		}
		for _, r := range got {
			if want := joinPath("", subpath); r.URL.Path != want || r.URL.RawQuery != rawQuery {
				t.Fatalf("the cluster was asked for %q ? %q; the gateway judged %q ? %q", r.URL.Path, r.URL.RawQuery, want, rawQuery)
			}
		}
	})
}

// A query with a '#' (which the server keeps in the query: a request line
// has no fragment) is forwarded as sent, by ordinary requests and upgrades;
// it once left UpgradeAwareHandler without a location (a nil dereference),
// found by FuzzInnerPath.
func TestProxyQueryWithHash(t *testing.T) {
	up := newCapture(t)
	px := newFixtureProxy(t, tokenSecret("c", up.srv.URL, upstreamCA(up.srv), "gw-token", "None"))
	for _, q := range []string{"#%0", "a=1#b=%zz", "#"} {
		req := httptest.NewRequest(http.MethodGet, "/x", nil)
		req.URL.RawQuery = q
		if rec := serveAs(px, "c", "/api/v1/namespaces", alice, req); rec.Code != http.StatusOK {
			t.Fatalf("query %q: %d %s", q, rec.Code, rec.Body)
		}
		if got := up.last(t).URL.RawQuery; got != q {
			t.Errorf("the cluster got the query %q, sent %q", got, q)
		}
		// An upgrade: the recorder cannot be hijacked, but the request reaches the cluster.
		before := len(up.requests())
		req = httptest.NewRequest(http.MethodPost, "/x", nil)
		req.URL.RawQuery = q
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "SPDY/3.1")
		serveAs(px, "c", "/api/v1/namespaces/default/pods/demo/exec", alice, req)
		if len(up.requests()) == before {
			t.Fatalf("upgrade with query %q: nothing reached the cluster", q)
		}
		if got := up.last(t).URL.RawQuery; got != q {
			t.Errorf("upgrade: the cluster got the query %q, sent %q", got, q)
		}
	}
}
