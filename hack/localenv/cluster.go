package localenv

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
)

// Cluster is one kube-apiserver: the hub or a managed cluster.
type Cluster struct {
	Name       string // "hub", "managed-1", ...
	IP         string // its own loopback address
	Port       int
	URL        string // https://IP:Port
	EtcdPrefix string
	CA         *CA      // signs the serving cert, client certs and the fake kubelet's cert
	Serving    *KeyPair // serving cert with an IP SAN for IP
	Admin      *KeyPair // client cert in group system:masters
	Kubeconfig string   // admin kubeconfig
	Process    *Process

	saKeyFile, saPubFile string
	args                 []string // extra kube-apiserver flags, kept for a restart

	// Managed clusters only.
	GatewayName      string   // name of its ClusterGateway on the hub: cluster-1, ...
	GatewayUser      *KeyPair // client cert of user "gateway" in system:masters, given to the ClusterGateway
	ViaHubKubeconfig string   // hub admin credentials, server = the hub's proxy URL for this cluster
	Kubelet          *FakeKubelet
	kubeletCert      *KeyPair
}

// ProxyURL is this managed cluster's base URL through the hub and the gateway.
func (c *Cluster) ProxyURL(hub *Cluster) string {
	return hub.URL + "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/" + c.GatewayName + "/proxy"
}

// RESTConfig returns an admin client config for this cluster.
func (c *Cluster) RESTConfig() *rest.Config {
	return &rest.Config{
		Host: c.URL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: c.CA.CertPEM, CertData: c.Admin.CertPEM, KeyData: c.Admin.KeyPEM,
		},
		QPS: 50, Burst: 100,
	}
}

// HTTPClient returns an admin HTTP client for this cluster (no client-go).
func (c *Cluster) HTTPClient() (*http.Client, error) {
	return mtlsClient(c.CA.CertPEM, c.Admin)
}

func mtlsClient(caPEM []byte, client *KeyPair) (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificates in CA bundle")
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if client != nil {
		cert, err := tls.X509KeyPair(client.CertPEM, client.KeyPEM)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 30 * time.Second}, nil
}

// newCluster generates a cluster's PKI under <state>/pki/<name>.
func (e *Env) newCluster(name, ip string, managed bool) (*Cluster, error) {
	dir := filepath.Join(e.StateDir, "pki", name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	c := &Cluster{Name: name, IP: ip, EtcdPrefix: "/" + name}
	var err error
	if c.CA, err = newCA(dir, "ca"); err != nil {
		return nil, err
	}
	if c.Serving, err = c.CA.issue(dir, "apiserver", certSpec{
		CommonName: "kube-apiserver",
		DNSNames:   []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPs:        []string{ip, "10.0.0.1"},
		Server:     true,
	}); err != nil {
		return nil, err
	}
	if c.Admin, err = c.CA.issue(dir, "admin", certSpec{CommonName: name + "-admin", Organization: []string{"system:masters"}, Client: true}); err != nil {
		return nil, err
	}
	if c.saKeyFile, c.saPubFile, err = newSigningKey(dir, "sa"); err != nil {
		return nil, err
	}
	c.Kubeconfig = filepath.Join(e.StateDir, name+".kubeconfig")
	if !managed {
		return c, nil
	}
	if c.GatewayUser, err = c.CA.issue(dir, "gateway", certSpec{CommonName: "gateway", Organization: []string{"system:masters"}, Client: true}); err != nil {
		return nil, err
	}
	// The managed kube-apiserver verifies the fake kubelet (--kubelet-certificate-authority).
	if c.kubeletCert, err = c.CA.issue(dir, "kubelet", certSpec{CommonName: "fake-node", IPs: []string{"127.0.0.1"}, Server: true}); err != nil {
		return nil, err
	}
	return c, nil
}
