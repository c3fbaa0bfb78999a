package localenv

import (
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"k8s.io/client-go/tools/clientcmd"
)

// writeKubeconfig writes a self-contained kubeconfig (data embedded, no file
// references) for one server and one identity: a client cert or a token.
func writeKubeconfig(path, name, server string, caPEM []byte, cert *KeyPair, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	user := &clientcmdapi.AuthInfo{Token: token}
	if cert != nil {
		user.ClientCertificateData, user.ClientKeyData = cert.CertPEM, cert.KeyPEM
	}
	cfg.AuthInfos[name] = user
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name, Namespace: "default"}
	cfg.CurrentContext = name
	return clientcmd.WriteToFile(*cfg, path)
}
