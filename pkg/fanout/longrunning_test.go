package fanout

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/clustergateway/cluster-gateway/pkg/proxy"
)

// A watch through a set runs past the request timeout, as a watch of one
// cluster does; a list through a set is held to it; every other request is
// left to the next check.
func TestIsLongRunning(t *testing.T) {
	hub := &apirequest.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}
	check := IsLongRunning(func(*http.Request, *apirequest.RequestInfo) bool { return true }, proxy.IsSetProxy)
	const set = "/apis/gateway.clustergateway.io/v1alpha1/clustersets/labels:env=prod/proxy"
	for target, want := range map[string]bool{
		set + "/api/v1/pods?watch=true":           true,
		set + "/api/v1/watch/pods":                true,
		set + "/api/v1/pods":                      false,
		set + "/api/v1/namespaces/default/pods/x": false,
		"/api/v1/pods":                            true, // the next check's answer
	} {
		r := httptest.NewRequest(http.MethodGet, target, nil)
		ri, err := hub.NewRequestInfo(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := check(r, ri); got != want {
			t.Errorf("%s: long-running %v, want %v", target, got, want)
		}
	}
}
