package proxy

import (
	"net/http"
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

var innerRequestInfo = &apirequest.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

// isProxy tells whether the hub-side request is for the proxy subresource.
func isProxy(ri *apirequest.RequestInfo) bool {
	return ri != nil && ri.IsResourceRequest && ri.APIGroup == v1alpha1.GroupName &&
		ri.Resource == "clustergateways" && ri.Subresource == "proxy" && len(ri.Parts) >= 3
}

// innerPath is the path on the managed cluster: what follows .../proxy.
func innerPath(ri *apirequest.RequestInfo) string {
	return "/" + strings.Join(ri.Parts[3:], "/")
}

// innerInfo returns the request as the managed cluster will see it, at
// path with r's method, query and headers; nil and the error when the path
// does not parse.
func innerInfo(r *http.Request, path string) (*apirequest.RequestInfo, error) {
	u := &url.URL{Path: path, RawQuery: r.URL.RawQuery}
	in, err := innerRequestInfo.NewRequestInfo(&http.Request{Method: r.Method, URL: u, Header: r.Header})
	if err != nil {
		return nil, err
	}
	return in, nil
}
