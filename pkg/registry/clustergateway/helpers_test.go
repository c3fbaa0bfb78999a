package clustergateway

import "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"

// redact is what a client reads of gw: no material, no proxy user info.
func redact(gw *v1alpha1.ClusterGateway) *v1alpha1.ClusterGateway {
	out := gw.DeepCopy()
	out.Spec.Credential.X509 = nil
	out.Spec.Credential.BearerToken = ""
	out.Spec.Endpoint.ProxyURL = v1alpha1.WithoutUserInfo(out.Spec.Endpoint.ProxyURL)
	return out
}
