package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/sets"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
)

// hubRequestInfo is how the gateway's own server describes a request.
var hubRequestInfo = &apirequest.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

const proxyPrefix = "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/c1/proxy"

// Streams are exempt from the request timeout; everything else keeps it.
func TestIsLongRunning(t *testing.T) {
	cases := []struct {
		name    string
		method  string
		target  string
		upgrade bool
		want    bool
	}{
		{"list", "GET", proxyPrefix + "/api/v1/namespaces/default/pods", false, false},
		{"get", "GET", proxyPrefix + "/api/v1/namespaces/default/pods/demo", false, false},
		{"create", "POST", proxyPrefix + "/api/v1/namespaces/default/configmaps", false, false},
		{"watch by query", "GET", proxyPrefix + "/api/v1/namespaces/default/pods?watch=true", false, true},
		{"watch by 1", "GET", proxyPrefix + "/apis/apps/v1/deployments?watch=1", false, true},
		{"watch=false", "GET", proxyPrefix + "/api/v1/pods?watch=false", false, false},
		{"logs", "GET", proxyPrefix + "/api/v1/namespaces/default/pods/demo/log", false, false},
		{"logs -f", "GET", proxyPrefix + "/api/v1/namespaces/default/pods/demo/log?follow=true", false, true},
		{"logs follow=1", "GET", proxyPrefix + "/api/v1/namespaces/default/pods/demo/log?follow=1", false, true},
		{"logs follow=false", "GET", proxyPrefix + "/api/v1/namespaces/default/pods/demo/log?follow=false", false, false},
		{"exec", "POST", proxyPrefix + "/api/v1/namespaces/default/pods/demo/exec?command=ls", false, true},
		{"exec upgrade", "GET", proxyPrefix + "/api/v1/namespaces/default/pods/demo/exec?command=ls", true, true},
		{"attach", "POST", proxyPrefix + "/api/v1/namespaces/default/pods/demo/attach", false, true},
		{"port-forward", "POST", proxyPrefix + "/api/v1/namespaces/default/pods/demo/portforward", false, true},
		{"pod proxy", "GET", proxyPrefix + "/api/v1/namespaces/default/pods/demo/proxy/healthz", false, true},
		{"any upgrade", "GET", proxyPrefix + "/version", true, true},
		{"non-resource", "GET", proxyPrefix + "/version", false, false},
		{"discovery", "GET", proxyPrefix + "/apis", false, false},
		{"hub list of gateways", "GET", "/apis/gateway.clustergateway.io/v1alpha1/clustergateways", false, false},
		{"hub watch of gateways", "GET", "/apis/gateway.clustergateway.io/v1alpha1/clustergateways?watch=true", false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.target, nil)
			if tc.upgrade {
				req.Header.Set("Connection", "Upgrade")
				req.Header.Set("Upgrade", "SPDY/3.1")
			}
			ri, err := hubRequestInfo.NewRequestInfo(req)
			if err != nil {
				t.Fatal(err)
			}
			if got := IsLongRunning(req, ri); got != tc.want {
				t.Errorf("IsLongRunning(%s %s) = %v, want %v (request info %+v)", tc.method, tc.target, got, tc.want, ri)
			}
			if tc.want != (requestKind(withInfo(req, ri)) != "request") {
				t.Errorf("metrics kind %q disagrees with IsLongRunning = %v", requestKind(withInfo(req, ri)), tc.want)
			}
		})
	}
}

func withInfo(req *http.Request, ri *apirequest.RequestInfo) *http.Request {
	return req.WithContext(apirequest.WithRequestInfo(req.Context(), ri))
}

// requestKind is the metrics label serve gives a proxied request; for other
// requests, what IsLongRunning makes of them.
func requestKind(req *http.Request) string {
	ri, _ := apirequest.RequestInfoFrom(req.Context())
	if !isProxy(ri) {
		if httpstream.IsUpgradeRequest(req) {
			return kindUpgrade
		}
		if IsLongRunning(req, ri) {
			return kindStream
		}
		return kindRequest
	}
	return parseInner(req, ri, innerPath(ri)).kind
}
