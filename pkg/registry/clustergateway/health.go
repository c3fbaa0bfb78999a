package clustergateway

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// Prober probes a managed cluster through the gateway (pkg/proxy).
type Prober interface {
	Probe(ctx context.Context, name string) (*v1alpha1.ClusterGatewayHealth, error)
}

// HealthREST is the clustergateways/{name}/health subresource: GET probes the
// cluster's /readyz through the gateway, so `kubectl get --raw` tells whether
// the proxy path works without reading the cluster's credential.
type HealthREST struct {
	prober Prober
}

// NewHealthREST returns the health subresource's storage.
func NewHealthREST(p Prober) *HealthREST { return &HealthREST{prober: p} }

var (
	_ rest.Getter  = &HealthREST{}
	_ rest.Storage = &HealthREST{}
)

func (r *HealthREST) New() runtime.Object { return &v1alpha1.ClusterGatewayHealth{} }
func (r *HealthREST) Destroy()            {}

// Get runs the probe.
func (r *HealthREST) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	return r.prober.Probe(ctx, name)
}
