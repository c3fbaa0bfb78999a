package localenv

import (
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// WriteKubeconfig writes a self-contained kubeconfig (data embedded, no file
// references) for one server and one user, in namespace default.
func WriteKubeconfig(path, name, server string, caPEM []byte, user *clientcmdapi.AuthInfo) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[name] = user
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name, Namespace: "default"}
	cfg.CurrentContext = name
	return clientcmd.WriteToFile(*cfg, path)
}

// writeKubeconfig is WriteKubeconfig for a client certificate or a token.
func writeKubeconfig(path, name, server string, caPEM []byte, cert *KeyPair, token string) error {
	user := &clientcmdapi.AuthInfo{Token: token}
	if cert != nil {
		user.ClientCertificateData, user.ClientKeyData = cert.CertPEM, cert.KeyPEM
	}
	return WriteKubeconfig(path, name, server, caPEM, user)
}
