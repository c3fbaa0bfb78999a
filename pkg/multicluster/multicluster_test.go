package multicluster

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

func TestConfigFor(t *testing.T) {
	hub := &rest.Config{
		Host:            "https://hub.example:6443",
		BearerToken:     "hub-token",
		TLSClientConfig: rest.TLSClientConfig{CAData: []byte("ca"), ServerName: "hub"},
		QPS:             7,
		UserAgent:       "me",
	}
	before := *rest.CopyConfig(hub)
	cfg := ConfigFor(hub, "prod-eu")
	if want := "https://hub.example:6443/apis/gateway.clustergateway.io/v1alpha1/clustergateways/prod-eu/proxy"; cfg.Host != want {
		t.Errorf("Host = %q, want %q", cfg.Host, want)
	}
	if cfg.BearerToken != "hub-token" || string(cfg.CAData) != "ca" || cfg.ServerName != "hub" || cfg.QPS != 7 || cfg.UserAgent != "me" {
		t.Errorf("auth, TLS or client settings changed: %+v", cfg)
	}
	if !reflect.DeepEqual(*hub, before) {
		t.Errorf("ConfigFor modified the hub config: %+v, was %+v", *hub, before)
	}
	if got := ConfigFor(&rest.Config{Host: "https://hub/prefix/"}, "c").Host; got != "https://hub/prefix/apis/gateway.clustergateway.io/v1alpha1/clustergateways/c/proxy" {
		t.Errorf("Host with a path: %q", got)
	}
}

// recorder is a hub stand-in that records the paths it was asked for and
// answers an empty list, enough for client-go to decode.
type recorder struct {
	mu    sync.Mutex
	paths []string
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.paths = append(r.paths, req.URL.Path)
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"apiVersion": "v1", "kind": "ConfigMapList", "items": []any{}, "metadata": map[string]any{}})
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.paths
	r.paths = nil
	return p
}

func TestContextConfigRoutesByContext(t *testing.T) {
	for _, prefix := range []string{"", "/hub-prefix"} {
		rec := &recorder{}
		srv := httptest.NewServer(rec)
		hub := &rest.Config{Host: srv.URL + prefix}
		dc, err := dynamic.NewForConfig(ContextConfig(hub))
		if err != nil {
			t.Fatal(err)
		}
		if hub.WrapTransport != nil {
			t.Errorf("ContextConfig set WrapTransport on the hub config")
		}
		cms := dc.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace("default")
		ctx := context.Background()
		for _, c := range []struct {
			ctx  context.Context
			want string
		}{
			{WithCluster(ctx, "cluster-1"), prefix + "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/cluster-1/proxy/api/v1/namespaces/default/configmaps"},
			{WithCluster(ctx, "cluster-2"), prefix + "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/cluster-2/proxy/api/v1/namespaces/default/configmaps"},
			{ctx, prefix + "/api/v1/namespaces/default/configmaps"},
		} {
			if _, err := cms.List(c.ctx, metav1.ListOptions{}); err != nil {
				t.Fatalf("prefix %q: list: %v", prefix, err)
			}
			if got := rec.take(); len(got) != 1 || got[0] != c.want {
				t.Errorf("prefix %q: server saw %v, want [%s]", prefix, got, c.want)
			}
		}
		srv.Close()
	}
}

type captureRT struct{ got *http.Request }

func (c *captureRT) RoundTrip(req *http.Request) (*http.Response, error) {
	c.got = req
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
}

func TestRoundTripperDoesNotModifyTheRequest(t *testing.T) {
	next := &captureRT{}
	rt := NewRoundTripper(next, "")
	req, _ := http.NewRequestWithContext(WithCluster(context.Background(), "c1"), http.MethodGet, "https://hub/api/v1/namespaces/a%2Fb?watch=true", nil)
	req.Header.Set("Authorization", "Bearer x")
	origURL := *req.URL
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if *req.URL != origURL {
		t.Errorf("caller's URL changed to %v", req.URL)
	}
	if next.got == req {
		t.Fatalf("next got the caller's request, want a clone")
	}
	if want := "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/c1/proxy/api/v1/namespaces/a%2Fb"; next.got.URL.EscapedPath() != want {
		t.Errorf("sent path %q, want %q", next.got.URL.EscapedPath(), want)
	}
	if next.got.URL.RawQuery != "watch=true" || next.got.Header.Get("Authorization") != "Bearer x" {
		t.Errorf("query %q or headers %v not carried over", next.got.URL.RawQuery, next.got.Header)
	}
}

func TestRoundTripperHubUnchanged(t *testing.T) {
	next := &captureRT{}
	req, _ := http.NewRequest(http.MethodGet, "https://hub/api/v1/pods", nil)
	resp, err := NewRoundTripper(next, "").RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if next.got != req {
		t.Errorf("a request without a cluster must pass through as is")
	}
}

type closeTracker struct {
	io.Reader
	closed bool
}

func (c *closeTracker) Close() error { c.closed = true; return nil }

func TestRoundTripperRefusesBadNames(t *testing.T) {
	for _, name := range []string{"", "a/b", "UPPER", "../x"} {
		next := &captureRT{}
		body := &closeTracker{Reader: strings.NewReader("x")}
		req, _ := http.NewRequestWithContext(WithCluster(context.Background(), name), http.MethodPost, "https://hub/api/v1/pods", body)
		if _, err := NewRoundTripper(next, "").RoundTrip(req); err == nil || !strings.Contains(err.Error(), "not a ClusterGateway name") {
			t.Errorf("cluster %q: err %v, want a refusal naming the problem", name, err)
		}
		if next.got != nil {
			t.Errorf("cluster %q: request was sent", name)
		}
		if !body.closed {
			t.Errorf("cluster %q: body not closed", name)
		}
	}
}
