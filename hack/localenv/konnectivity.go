package localenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// Konnectivity is a real proxy-server and proxy-agent on loopback, and one
// more managed cluster (managed-N+1 on 127.0.0.N+2, ClusterGateway
// cluster-N+1) whose ClusterGateway has endpoint type Konnectivity, so the
// gateway reaches it through the tunnel. Fields are read-only for callers;
// Server changes only in Stop/StartKonnectivityServer.
type Konnectivity struct {
	Cluster *Cluster // the managed cluster behind the agent

	Server *Process // proxy-server (--mode=grpc --proxy-strategies=destHost,default)
	Agent  *Process // proxy-agent (--agent-identifiers=ipv4=<Cluster.IP>)

	// proxy-server ports on 127.0.0.1: the gateway dials ServerPort, the
	// agent AgentPort; Health serves /readyz (ready = an agent is connected)
	// and /metrics.
	ServerPort, AgentPort, AdminPort, HealthPort int
	// proxy-agent ports on 127.0.0.1; AgentHealthPort serves /metrics.
	AgentAdminPort, AgentHealthPort   int
	ServerMetricsURL, AgentMetricsURL string // http://127.0.0.1:<health port>/metrics
	ServerAdminURL, AgentAdminURL     string // http://127.0.0.1:<admin port>

	// ServerCA signs the proxy-server's serving cert (IP SAN 127.0.0.1);
	// ClientCA signs the gateway's client certs (the proxy-server trusts
	// it); AgentCA signs the agent-facing cert and the agent's client cert.
	ServerCA, ClientCA, AgentCA *CA
	// The gateway's --konnectivity-{ca,cert,key}-file: CAFile starts as a
	// copy of ServerCA, CertFile/KeyFile as Client. The gateway re-reads them
	// every second, so tests rotate them in place (see ReplaceFile).
	CAFile, CertFile, KeyFile string
	Client                    *KeyPair

	dir        string
	serverArgs []string
}

// ServerAddress is the gateway's --konnectivity-server-address.
func (k *Konnectivity) ServerAddress() string { return hostPort("127.0.0.1", k.ServerPort) }

func konnectivityBinaries(binDir string) error {
	var errs []error
	for _, b := range []string{"proxy-server", "proxy-agent"} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			errs = append(errs, fmt.Errorf("missing %s: run `make tools` (or run without konnectivity: Options.NoKonnectivity, local-env -no-konnectivity)", filepath.Join(binDir, b)))
		}
	}
	return errors.Join(errs...)
}

// newKonnectivity generates the PKI of the proxy-server, the agent and the
// gateway's client, and of the managed cluster behind the agent.
func (e *Env) newKonnectivity() error {
	n := e.ManagedClusters + 1
	c, err := e.newCluster(fmt.Sprintf("managed-%d", n), fmt.Sprintf("127.0.0.%d", n+1), true)
	if err != nil {
		return err
	}
	c.GatewayName = fmt.Sprintf("cluster-%d", n)
	c.ViaHubKubeconfig = filepath.Join(e.StateDir, c.GatewayName+"-via-hub.kubeconfig")
	k := &Konnectivity{Cluster: c, dir: filepath.Join(e.StateDir, "pki", "konnectivity")}
	if err := os.MkdirAll(k.dir, 0o700); err != nil {
		return err
	}
	if k.ServerCA, err = newCA(k.dir, "server-ca"); err != nil {
		return err
	}
	if k.ClientCA, err = newCA(k.dir, "client-ca"); err != nil {
		return err
	}
	if k.AgentCA, err = newCA(k.dir, "agent-ca"); err != nil {
		return err
	}
	local := certSpec{IPs: []string{"127.0.0.1"}, DNSNames: []string{"localhost"}, Server: true}
	local.CommonName = "proxy-server"
	if _, err := k.ServerCA.issue(k.dir, "server", local); err != nil {
		return err
	}
	local.CommonName = "proxy-server-cluster"
	if _, err := k.AgentCA.issue(k.dir, "cluster", local); err != nil {
		return err
	}
	if _, err := k.AgentCA.issue(k.dir, "agent", certSpec{CommonName: "proxy-agent", Client: true}); err != nil {
		return err
	}
	if k.Client, err = k.ClientCA.issue(k.dir, "gateway-client", certSpec{CommonName: "cluster-gateway", Client: true}); err != nil {
		return err
	}
	// A copy: rotating the gateway's CA file must not touch ServerCA's own.
	k.CAFile, k.CertFile, k.KeyFile = filepath.Join(k.dir, "gateway-ca.crt"), k.Client.CertFile, k.Client.KeyFile
	if err := ReplaceFile(k.CAFile, k.ServerCA.CertPEM); err != nil {
		return err
	}
	ports := make([]int, 6)
	for i := range ports {
		if ports[i], err = freePort("127.0.0.1"); err != nil {
			return err
		}
	}
	k.setPorts(ports)
	e.Konnectivity = k
	return nil
}

func (k *Konnectivity) setPorts(p []int) {
	k.ServerPort, k.AgentPort, k.AdminPort, k.HealthPort, k.AgentAdminPort, k.AgentHealthPort = p[0], p[1], p[2], p[3], p[4], p[5]
	k.ServerMetricsURL = "http://" + hostPort("127.0.0.1", k.HealthPort) + "/metrics"
	k.AgentMetricsURL = "http://" + hostPort("127.0.0.1", k.AgentHealthPort) + "/metrics"
	k.ServerAdminURL = "http://" + hostPort("127.0.0.1", k.AdminPort)
	k.AgentAdminURL = "http://" + hostPort("127.0.0.1", k.AgentAdminPort)
}

// IssueClientCert signs a new gateway client certificate with ClientCA
// (files <name>.crt/.key next to the others; CertFile and KeyFile unchanged).
func (k *Konnectivity) IssueClientCert(name string) (*KeyPair, error) {
	return k.ClientCA.issue(k.dir, name, certSpec{CommonName: "cluster-gateway", Client: true})
}

// ReplaceFile writes data to path with a rename, as a kubelet updates a
// mounted Secret, so the gateway never reads a half-written file.
func ReplaceFile(path string, data []byte) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// konnectivityGatewayArgs point the gateway at the proxy-server. A 1s
// reload interval lets tests see rotations quickly.
func (e *Env) konnectivityGatewayArgs() []string {
	k := e.Konnectivity
	if k == nil {
		return nil
	}
	return []string{
		"--konnectivity-server-address=" + k.ServerAddress(),
		"--konnectivity-ca-file=" + k.CAFile,
		"--konnectivity-cert-file=" + k.CertFile,
		"--konnectivity-key-file=" + k.KeyFile,
		"--konnectivity-reload-interval=1s",
	}
}

// clusterGateway describes the cluster behind the agent: the address the
// agent dials, with the cluster's CA verified through the tunnel.
func (k *Konnectivity) clusterGateway() *gatewayv1alpha1.ClusterGateway {
	gw := clusterGateway(k.Cluster)
	gw.Spec.Endpoint.Type = gatewayv1alpha1.EndpointKonnectivity
	return gw
}

// writeKonnectivityKubeconfigs writes managed-N.kubeconfig (direct) and
// cluster-N-via-hub.kubeconfig (through the hub, the gateway and the tunnel).
func (e *Env) writeKonnectivityKubeconfigs() error {
	if e.Konnectivity == nil {
		return nil
	}
	c := e.Konnectivity.Cluster
	if err := writeKubeconfig(c.Kubeconfig, c.Name, c.URL, c.CA.CertPEM, c.Admin, ""); err != nil {
		return err
	}
	return writeKubeconfig(c.ViaHubKubeconfig, c.GatewayName, c.ProxyURL(e.Hub), e.Hub.CA.CertPEM, e.Hub.Admin, "")
}

func (k *Konnectivity) summary() string {
	return fmt.Sprintf("%s %s (behind proxy-server %s)", k.Cluster.Name, k.Cluster.URL, k.ServerAddress())
}
