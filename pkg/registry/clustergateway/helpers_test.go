package clustergateway

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

func x509Gateway(c testCredential) *v1alpha1.ClusterGateway {
	return &v1alpha1.ClusterGateway{
		ObjectMeta: metav1.ObjectMeta{Name: "c1"},
		Spec: v1alpha1.ClusterGatewaySpec{
			Endpoint: v1alpha1.Endpoint{
				Type:       v1alpha1.EndpointDirect,
				Address:    "https://127.0.0.2:6443",
				CABundle:   c.caPEM,
				ServerName: "kubernetes",
				ProxyURL:   "socks5://127.0.0.1:1080",
			},
			Credential: v1alpha1.Credential{
				Type: v1alpha1.CredentialX509Certificate,
				X509: &v1alpha1.X509Credential{Certificate: c.certPEM, PrivateKey: c.keyPEM},
			},
			Impersonation: v1alpha1.Impersonation{Mode: v1alpha1.ImpersonationCaller},
		},
	}
}

func tokenGateway(token string) *v1alpha1.ClusterGateway {
	return &v1alpha1.ClusterGateway{
		ObjectMeta: metav1.ObjectMeta{Name: "c2"},
		Spec: v1alpha1.ClusterGatewaySpec{
			Endpoint:      v1alpha1.Endpoint{Type: v1alpha1.EndpointDirect, Address: "https://127.0.0.3:6443", InsecureSkipTLSVerify: true},
			Credential:    v1alpha1.Credential{Type: v1alpha1.CredentialBearerToken, BearerToken: token},
			Impersonation: v1alpha1.Impersonation{Mode: v1alpha1.ImpersonationNone},
		},
	}
}

// redact is what a client reads of gw: no material, no proxy user info.
func redact(gw *v1alpha1.ClusterGateway) *v1alpha1.ClusterGateway {
	out := gw.DeepCopy()
	out.Spec.Credential.X509 = nil
	out.Spec.Credential.BearerToken = ""
	out.Spec.Endpoint.ProxyURL = v1alpha1.WithoutUserInfo(out.Spec.Endpoint.ProxyURL)
	return out
}
