package localenv

import (
	"bytes"
	"os"
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// clusterGateway describes managed cluster c to the gateway: Direct to its
// kube-apiserver, verified with its CA, as user "gateway" (system:masters).
func clusterGateway(c *Cluster) *gatewayv1alpha1.ClusterGateway {
	return &gatewayv1alpha1.ClusterGateway{
		TypeMeta:   metav1.TypeMeta{APIVersion: "gateway.clustergateway.io/v1alpha1", Kind: "ClusterGateway"},
		ObjectMeta: metav1.ObjectMeta{Name: c.GatewayName},
		Spec: gatewayv1alpha1.ClusterGatewaySpec{
			Endpoint: gatewayv1alpha1.Endpoint{
				Type:     gatewayv1alpha1.EndpointDirect,
				Address:  c.URL,
				CABundle: c.CA.CertPEM,
			},
			Credential: gatewayv1alpha1.Credential{
				Type: gatewayv1alpha1.CredentialX509Certificate,
				X509: &gatewayv1alpha1.X509Credential{Certificate: c.GatewayUser.CertPEM, PrivateKey: c.GatewayUser.KeyPEM},
			},
		},
	}
}

// createClusterGateways creates cluster-1, cluster-2, ... through the hub
// with kubectl apply, as an operator would. (The gateway must keep the
// credential out of apply's last-applied-configuration annotation.)
func (e *Env) createClusterGateways() error {
	var gws []*gatewayv1alpha1.ClusterGateway
	for _, c := range e.Managed {
		gws = append(gws, clusterGateway(c))
	}
	if e.Konnectivity != nil {
		gws = append(gws, e.Konnectivity.clusterGateway())
	}
	var docs [][]byte
	for _, gw := range gws {
		b, err := yaml.Marshal(gw)
		if err != nil {
			return err
		}
		docs = append(docs, b)
	}
	path := filepath.Join(e.StateDir, "manifests", "clustergateways.yaml")
	if err := os.WriteFile(path, bytes.Join(docs, []byte("---\n")), 0o600); err != nil {
		return err
	}
	_, err := e.Kubectl(e.Hub.Kubeconfig, "apply", "-f", path)
	return err
}
