package clustergateway

import (
	"context"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// ProxyHandler serves a request for a gateway's managed cluster (pkg/proxy).
type ProxyHandler interface {
	Handler(name, subpath string) http.Handler
}

// ProxyREST is the clustergateways/{name}/proxy/{path} subresource.
type ProxyREST struct {
	proxy ProxyHandler
}

// NewProxyREST returns the proxy subresource's storage.
func NewProxyREST(p ProxyHandler) *ProxyREST { return &ProxyREST{proxy: p} }

var (
	_ rest.Connecter = &ProxyREST{}
	_ rest.Storage   = &ProxyREST{}
)

var proxyMethods = []string{"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"}

func (r *ProxyREST) New() runtime.Object { return &v1alpha1.ClusterGatewayProxyOptions{} }
func (r *ProxyREST) Destroy()            {}

// ConnectMethods are every verb a managed cluster serves.
func (r *ProxyREST) ConnectMethods() []string { return proxyMethods }

// NewConnectOptions takes the rest of the path as the "path" option.
func (r *ProxyREST) NewConnectOptions() (runtime.Object, bool, string) {
	return &v1alpha1.ClusterGatewayProxyOptions{}, true, "path"
}

// Connect returns the handler that forwards the request.
func (r *ProxyREST) Connect(_ context.Context, name string, opts runtime.Object, _ rest.Responder) (http.Handler, error) {
	o, ok := opts.(*v1alpha1.ClusterGatewayProxyOptions)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid options object: %#v", opts))
	}
	return r.proxy.Handler(name, o.Path), nil
}
