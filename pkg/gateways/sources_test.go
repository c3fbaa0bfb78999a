package gateways

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

const (
	sourceNamespace    = "capi-clusters"
	forbiddenNamespace = "no-access"
)

func refGateway(name string, ref v1alpha1.SecretReference, address string) *v1alpha1.ClusterGateway {
	gw := &v1alpha1.ClusterGateway{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ClusterGatewaySpec{
			Endpoint:   v1alpha1.Endpoint{Address: address},
			Credential: v1alpha1.Credential{Type: v1alpha1.CredentialSecretRef, SecretRef: &ref},
		},
	}
	v1alpha1.SetDefaults_ClusterGateway(gw)
	return gw
}

// kubeconfigBytes is a Cluster API-style kubeconfig: server, CA and either a
// token or a client certificate, all inline.
func kubeconfigBytes(t testing.TB, server string, ca []byte, token string, cert, key []byte) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca, TLSServerName: "kubernetes"}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: token, ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts["ctx"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "ctx"
	raw, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func capiSecret(name, rv string, kubeconfig []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: sourceNamespace, ResourceVersion: rv,
			Labels: map[string]string{"cluster.x-k8s.io/cluster-name": strings.TrimSuffix(name, "-kubeconfig")}},
		Type: "cluster.x-k8s.io/secret",
		Data: map[string][]byte{"value": kubeconfig},
	}
}

// jwt is an unsigned JWT with exp: the gateway reads exp only to show it.
func jwt(exp time.Time) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"none"}`)) + "." + enc([]byte(fmt.Sprintf(`{"sub":"gw","exp":%d}`, exp.Unix()))) + ".sig"
}

func readyReason(g *Gateway) string {
	for _, c := range g.Object.Status.Conditions {
		if c.Type == v1alpha1.ConditionReady {
			return c.Reason
		}
	}
	return ""
}
