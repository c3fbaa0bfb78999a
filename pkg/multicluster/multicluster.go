// Package multicluster lets a Go client reach managed clusters through the
// hub and the cluster-gateway, with the hub's own credentials.
//
// Two ways, both with any client-go client (typed, dynamic, controller-runtime):
//
//	// One client per cluster:
//	cfg := multicluster.ConfigFor(hub, "prod-eu")
//	cs := kubernetes.NewForConfigOrDie(cfg)
//
//	// One client for all clusters, chosen per request by the context:
//	cs := kubernetes.NewForConfigOrDie(multicluster.ContextConfig(hub))
//	cs.CoreV1().Pods("").List(multicluster.WithCluster(ctx, "prod-eu"), opts) // prod-eu
//	cs.CoreV1().Pods("").List(ctx, opts)                                      // the hub itself
//
// A request is sent to
// <hub>/apis/gateway.clustergateway.io/v1alpha1/clustergateways/<cluster>/proxy/<path>,
// so the caller needs the hub permission on clustergateways/proxy (the
// ClusterRole cluster-gateway:proxy). This package imports only client-go and
// apimachinery.
package multicluster

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
)

// ProxyPath is the hub path under which cluster's API server is reached.
func ProxyPath(cluster string) string {
	return "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/" + url.PathEscape(cluster) + "/proxy"
}

// ConfigFor returns a copy of hub whose requests go to cluster: the hub's
// host with ProxyPath(cluster) appended. Authentication, TLS, rate limits and
// transport settings are the hub's, untouched; hub itself is not modified.
func ConfigFor(hub *rest.Config, cluster string) *rest.Config {
	cfg := rest.CopyConfig(hub)
	cfg.Host = strings.TrimSuffix(hub.Host, "/") + ProxyPath(cluster)
	return cfg
}

// ContextConfig returns a copy of hub whose clients send each request to the
// cluster named in the request's context (WithCluster), and requests whose
// context names no cluster to the hub, unchanged. hub is not modified.
func ContextConfig(hub *rest.Config) *rest.Config {
	cfg := rest.CopyConfig(hub)
	prefix := hostPath(hub.Host)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return NewRoundTripper(rt, prefix) })
	return cfg
}

type clusterKey struct{}

// WithCluster returns a context whose requests, made by a client of
// ContextConfig or NewRoundTripper, go to cluster.
func WithCluster(ctx context.Context, cluster string) context.Context {
	return context.WithValue(ctx, clusterKey{}, cluster)
}

// ClusterFromContext returns the cluster that WithCluster put in ctx.
func ClusterFromContext(ctx context.Context) (string, bool) {
	c, ok := ctx.Value(clusterKey{}).(string)
	return c, ok
}

// NewRoundTripper returns a round tripper that sends each request whose
// context names a cluster (WithCluster) to that cluster's proxy path on the
// same host, and any other request to next unchanged. hubPrefix is the path
// of the hub's URL ("" unless the hub is served under a path); requests are
// expected under it. The caller's request is never modified: a rewritten
// request is a clone.
func NewRoundTripper(next http.RoundTripper, hubPrefix string) http.RoundTripper {
	return &roundTripper{next: next, prefix: strings.TrimSuffix(hubPrefix, "/")}
}

type roundTripper struct {
	next   http.RoundTripper
	prefix string
}

func (rt *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	cluster, ok := ClusterFromContext(req.Context())
	if !ok {
		return rt.next.RoundTrip(req)
	}
	fail := func(err error) (*http.Response, error) {
		// A RoundTripper must close the body, even on error.
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, err
	}
	if errs := validation.IsDNS1123Subdomain(cluster); len(errs) > 0 {
		return fail(fmt.Errorf("multicluster: cluster name %q in the request context is not a ClusterGateway name: %s", cluster, strings.Join(errs, "; ")))
	}
	if !strings.HasPrefix(req.URL.Path, rt.prefix+"/") && req.URL.Path != rt.prefix {
		return fail(fmt.Errorf("multicluster: request path %q is not under the hub's path %q", req.URL.Path, rt.prefix))
	}
	out := req.Clone(req.Context())
	insert := ProxyPath(cluster)
	out.URL.Path = rt.prefix + insert + strings.TrimPrefix(req.URL.Path, rt.prefix)
	if req.URL.RawPath != "" {
		out.URL.RawPath = rt.prefix + insert + strings.TrimPrefix(req.URL.RawPath, rt.prefix)
	}
	return rt.next.RoundTrip(out)
}

// WrappedRoundTripper lets client-go reach the transport underneath (to
// cancel requests and close idle connections).
func (rt *roundTripper) WrappedRoundTripper() http.RoundTripper { return rt.next }

// hostPath is the path of a rest.Config Host ("https://hub:6443/prefix" or
// "hub:6443/prefix"), without a trailing slash.
func hostPath(host string) string {
	u, err := url.Parse(host)
	if err != nil || u.Scheme == "" || u.Host == "" {
		if u, err = url.Parse("https://" + host); err != nil {
			return ""
		}
	}
	return strings.TrimSuffix(u.Path, "/")
}
