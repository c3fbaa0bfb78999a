package localenv

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
)

// startAPIServer starts c's kube-apiserver on a free port of c.IP and waits
// for /readyz. It retries with another port if the chosen one was taken.
func (e *Env) startAPIServer(ctx context.Context, c *Cluster, extra []string) error {
	client, err := mtlsClient(c.CA.CertPEM, c.Admin)
	if err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		port, err := freePort(c.IP)
		if err != nil {
			return err
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
