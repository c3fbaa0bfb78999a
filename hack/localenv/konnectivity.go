package localenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/clustergateway/cluster-gateway/internal/testbalancer"
	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// Konnectivity is real proxy-servers (two by default: Options.KonnectivityServers)
// and a proxy-agent on loopback, and one more managed cluster (managed-N+1 on
// 127.0.0.N+2, ClusterGateway cluster-N+1) whose ClusterGateway has endpoint
// type Konnectivity, so the gateway reaches it through the tunnels. The agent
// reaches every proxy-server through one balanced address (AgentBalancer, as a
// Service would be) and stays connected to each (--server-count). Fields are
// read-only for callers; a ProxyServer's Process changes only in
// Stop/StartKonnectivityServer.
type Konnectivity struct {
	Cluster *Cluster // the managed cluster behind the agent

	Servers []*ProxyServer // --mode=grpc --proxy-strategies=destHost,default, each its own --server-id
	Agent   *Process       // proxy-agent (--agent-identifiers=ipv4=<Cluster.IP>)
	// AgentBalancer forwards the agent's connections to the proxy-servers'
	// agent ports in turn (refusing ones skipped), until it holds one to each;
	// nil with one proxy-server, which the agent dials itself.
	AgentBalancer *testbalancer.Balancer

	// proxy-agent ports on 127.0.0.1; AgentHealthPort serves /metrics.
	AgentAdminPort, AgentHealthPort int
	AgentMetricsURL, AgentAdminURL  string // http://127.0.0.1:<port>[/metrics]

	// ServerCA signs the proxy-servers' serving cert (IP SAN 127.0.0.1);
	// ClientCA signs the gateway's client certs (the proxy-servers trust
	// it); AgentCA signs the agent-facing cert and the agent's client cert.
	ServerCA, ClientCA, AgentCA *CA
	// The gateway's --konnectivity-{ca,cert,key}-file: CAFile starts as a
	// copy of ServerCA, CertFile/KeyFile as Client. The gateway re-reads them
	// every second, so tests rotate them in place (see ReplaceFile).
	CAFile, CertFile, KeyFile string
	Client                    *KeyPair

	dir string
}

// ProxyServer is one proxy-server and its ports on 127.0.0.1: the gateway
// dials ServerPort, the agent AgentPort (through AgentBalancer); HealthPort
// serves /readyz (ready = an agent is connected) and /metrics.
type ProxyServer struct {
	ID                                           string
	Process                                      *Process
	ServerPort, AgentPort, AdminPort, HealthPort int
	MetricsURL, AdminURL                         string // http://127.0.0.1:<port>[/metrics]

	args []string
}

// Address is the proxy-server's address for the gateway.
func (p *ProxyServer) Address() string { return hostPort("127.0.0.1", p.ServerPort) }

// ServerAddresses are the gateway's --konnectivity-server-address values.
func (k *Konnectivity) ServerAddresses() []string {
	var as []string
	for _, p := range k.Servers {
		as = append(as, p.Address())
	}
	return as
}

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
	for i := range e.KonnectivityServers {
		k.Servers = append(k.Servers, &ProxyServer{ID: fmt.Sprintf("proxy-server-%d", i)})
	}
	if err := k.newPorts(); err != nil {
		return err
	}
	e.Konnectivity = k
	return nil
}

// newPorts picks free ports for the proxy-servers and the agent.
func (k *Konnectivity) newPorts() error {
	ports := make([]int, 2+4*len(k.Servers))
	for i := range ports {
		var err error
		if ports[i], err = freePort("127.0.0.1"); err != nil {
			return err
		}
	}
	k.AgentAdminPort, k.AgentHealthPort = ports[0], ports[1]
	k.AgentMetricsURL = "http://" + hostPort("127.0.0.1", k.AgentHealthPort) + "/metrics"
	k.AgentAdminURL = "http://" + hostPort("127.0.0.1", k.AgentAdminPort)
	for i, p := range k.Servers {
		q := ports[2+4*i:]
		p.ServerPort, p.AgentPort, p.AdminPort, p.HealthPort = q[0], q[1], q[2], q[3]
		p.MetricsURL = "http://" + hostPort("127.0.0.1", p.HealthPort) + "/metrics"
		p.AdminURL = "http://" + hostPort("127.0.0.1", p.AdminPort)
	}
	return nil
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

// konnectivityGatewayArgs point the gateway at the proxy-servers. A 1s
// reload interval lets tests see rotations quickly.
func (e *Env) konnectivityGatewayArgs() []string {
	k := e.Konnectivity
	if k == nil {
		return nil
	}
	return []string{
		"--konnectivity-server-address=" + strings.Join(k.ServerAddresses(), ","),
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
	return fmt.Sprintf("%s %s (behind proxy-servers %s)", k.Cluster.Name, k.Cluster.URL, strings.Join(k.ServerAddresses(), ", "))
}
