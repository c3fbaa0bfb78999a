package apiserver

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildHandlerChain is a copy of k8s.io/apiserver's DefaultBuildHandlerChain
// with a few changes for proxied requests. When k8s.io/apiserver is upgraded
// and that function changes (a new filter, a reordering: possibly a security
// fix), this test fails until someone has compared the two and updated
// testdata/DefaultBuildHandlerChain.go.txt to the version reviewed.
func TestHandlerChainFollowsUpstream(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}} {{.Version}}", "k8s.io/apiserver").Output()
	if err != nil {
		t.Fatalf("go list -m k8s.io/apiserver: %v", err)
	}
	dir, version, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	src, err := os.ReadFile(filepath.Join(dir, "pkg", "server", "config.go"))
	if err != nil {
		t.Fatal(err)
	}
	got := functionSource(string(src), "func DefaultBuildHandlerChain(")
	if got == "" {
		t.Fatalf("k8s.io/apiserver %s has no DefaultBuildHandlerChain in pkg/server/config.go: review pkg/apiserver/handlerchain.go", version)
	}
	golden := filepath.Join("testdata", "DefaultBuildHandlerChain.go.txt")
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("k8s.io/apiserver %s changed DefaultBuildHandlerChain since pkg/apiserver/handlerchain.go was written from it: "+
			"compare the two (diff %s against the function in %s), carry the change over, then copy the new function into %s",
			version, golden, filepath.Join(dir, "pkg", "server", "config.go"), golden)
	}
}

// functionSource is the text of the top-level function whose declaration
// starts with decl, up to its closing brace at the start of a line.
func functionSource(src, decl string) string {
	i := strings.Index(src, "\n"+decl)
	if i < 0 {
		return ""
	}
	rest := src[i+1:]
	j := strings.Index(rest, "\n}\n")
	if j < 0 {
		return ""
	}
	return rest[:j+3]
}

// looksOrdinary is a hint only, but a stream it passes holds a worker for its
// life: the kinds of streaming request kubectl and client-go send are refused.
func TestLooksOrdinary(t *testing.T) {
	const proxy = "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/c/proxy"
	for _, c := range []struct {
		method, url string
		header      http.Header
		want        bool
	}{
		{"GET", proxy + "/api/v1/namespaces/default", nil, true},
		{"GET", proxy + "/api/v1/pods?limit=500", nil, true},
		{"PATCH", proxy + "/apis/apps/v1/namespaces/d/deployments/x?fieldManager=kubectl", nil, true},
		{"GET", "/apis/gateway.clustergateway.io/v1alpha1/clustergateways", nil, true},
		{"GET", proxy + "/api/v1/pods?watch=true&resourceVersion=1", nil, false},
		{"GET", proxy + "/api/v1/pods?allowWatchBookmarks=true&watch=1", nil, false},
		{"GET", proxy + "/api/v1/watch/namespaces/d/pods", nil, false},
		{"GET", proxy + "/api/v1/namespaces/d/pods/p/log?follow=true", nil, false},
		{"POST", proxy + "/api/v1/namespaces/d/pods/p/exec?command=sh", http.Header{"Upgrade": {"SPDY/3.1"}}, false},
		{"GET", proxy + "/api/v1/namespaces/d/pods/p/exec?command=sh", http.Header{"Sec-Websocket-Protocol": {"v5.channel.k8s.io"}}, false},
		{"POST", proxy + "/api/v1/namespaces/d/pods/p/portforward", nil, false},
		{"POST", proxy + "/api/v1/namespaces/d/pods/p/attach", nil, false},
		{"GET", "/apis/gateway.clustergateway.io/v1alpha1/clustergateways?watch=true", nil, false},
	} {
		r := httptest.NewRequest(c.method, c.url, nil)
		for k, v := range c.header {
			r.Header[k] = v
		}
		if got := looksOrdinary(r); got != c.want {
			t.Errorf("%s %s %v: looksOrdinary %v, want %v", c.method, c.url, c.header, got, c.want)
		}
	}
}
