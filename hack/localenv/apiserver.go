package localenv

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"
)

// startAPIServer starts c's kube-apiserver on a free port of c.IP (or on
// c.Port again, for a restart) and waits for /readyz. It retries with another
// port if the chosen one was taken.
func (e *Env) startAPIServer(ctx context.Context, c *Cluster, extra []string) error {
	client, err := mtlsClient(c.CA.CertPEM, c.Admin)
	if err != nil {
		return err
	}
	c.args = extra
	for attempt := 1; ; attempt++ {
		port := c.Port
		if port == 0 {
			if port, err = freePort(c.IP); err != nil {
				return err
			}
		}
		args := append([]string{
			"--etcd-servers=" + e.EtcdURL,
			"--etcd-prefix=" + c.EtcdPrefix,
			"--bind-address=" + c.IP,
			"--secure-port=" + strconv.Itoa(port),
			// A loopback advertise address is refused unless nothing reconciles endpoints.
			"--advertise-address=" + c.IP,
			"--endpoint-reconciler-type=none",
			"--cert-dir=" + filepath.Join(e.StateDir, "pki", c.Name),
			"--tls-cert-file=" + c.Serving.CertFile,
			"--tls-private-key-file=" + c.Serving.KeyFile,
			"--client-ca-file=" + c.CA.CertFile,
			"--service-account-key-file=" + c.saPubFile,
			"--service-account-signing-key-file=" + c.saKeyFile,
			"--service-account-issuer=https://kubernetes.default.svc",
			"--service-cluster-ip-range=10.0.0.0/24",
			"--authorization-mode=RBAC",
		}, extra...)
		p, err := e.start(c.Name, "kube-apiserver", args...)
		if err != nil {
			return err
		}
		url := "https://" + hostPort(c.IP, port)
		err = waitReady(ctx, p, c.Name+" kube-apiserver", func(ctx context.Context) error {
			return httpOK(ctx, client, url+"/readyz")
		})
		if err != nil && p.addrInUse() && attempt < 3 {
			if c.Port != 0 {
				time.Sleep(time.Second) // a restart: the old socket may linger briefly
			}
			continue
		}
		if err != nil {
			return err
		}
		c.Port, c.URL, c.Process = port, url, p
		return nil
	}
}

// hubArgs enable the aggregation layer, so the hub can route to the gateway.
func (e *Env) hubArgs() []string {
	args := []string{
		"--requestheader-client-ca-file=" + e.FrontProxyCA.CertFile,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + e.frontProxyClient.CertFile,
		"--proxy-client-key-file=" + e.frontProxyClient.KeyFile,
		// Route to the Service (ExternalName → the gateway on loopback), not to endpoints.
		"--enable-aggregator-routing=false",
	}
	if e.HubRequestTimeout > 0 {
		args = append(args, fmt.Sprintf("--request-timeout=%s", e.HubRequestTimeout))
	}
	return args
}

func managedArgs(c *Cluster) []string {
	return []string{
		// Dial the fake kubelet at the Node's InternalIP instead of resolving its hostname.
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		"--kubelet-certificate-authority=" + c.CA.CertFile,
	}
}

// StopCluster stops c's kube-apiserver (SIGTERM, then SIGKILL), as a cluster
// outage would; StartCluster brings it back on the same address.
func (e *Env) StopCluster(c *Cluster) error {
	if c.Process == nil {
		return nil
	}
	err := c.Process.Stop(stopGrace)
	c.Process = nil
	return err
}

// KillCluster ends c's kube-apiserver with SIGKILL: connections to it are cut
// without a goodbye.
func (e *Env) KillCluster(c *Cluster) error {
	if c.Process == nil {
		return nil
	}
	err := c.Process.Kill()
	c.Process = nil
	return err
}

// StartCluster starts a stopped kube-apiserver again, on its port and with
// its flags, and waits for /readyz. For the hub, while the gateway runs, it
// also waits as StartGateway does: until the APIService is Available again
// and the hub lists ClusterGateways through the gateway.
func (e *Env) StartCluster(ctx context.Context, c *Cluster) error {
	if c.Process != nil && !c.Process.Exited() {
		return fmt.Errorf("%s is running (pid %d)", c.Name, c.Process.Pid())
	}
	if err := e.startAPIServer(ctx, c, c.args); err != nil {
		return err
	}
	if c != e.Hub || e.Gateway == nil || e.Gateway.Process == nil || e.Gateway.Process.Exited() {
		return nil
	}
	return e.waitHubServesGateway(ctx)
}
