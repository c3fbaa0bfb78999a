package gateways

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// sourceNamespace holds credential Secrets; the tests of their
// resolution are pkg/clusters'.
const sourceNamespace = "capi-clusters"

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
