package localenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// StartAPIServerReplica starts another kube-apiserver of cluster c (a
// managed cluster, or the hub) on ip (a loopback address of its own): a
// second control-plane node of the same cluster, with c's etcd prefix, CA,
// service-account keys and flags, so the same credentials work on both (a
// hub replica aggregates the same APIService, so it reaches the gateway). Its serving certificate, from c's CA,
// covers c's address and ip. Stop it with StopCluster or KillCluster, which
// stop only it; StartCluster brings it back on its port. Env.Stop stops it
// with everything else. extra flags are added to c's (an authentication
// config, say).
func (e *Env) StartAPIServerReplica(ctx context.Context, c *Cluster, ip string, extra ...string) (*Cluster, error) {
	if c != e.Hub && c.GatewayUser == nil {
		return nil, fmt.Errorf("%s is neither the hub nor a managed cluster of this environment", c.Name)
	}
	name := c.Name + "-at-" + ip
	dir := filepath.Join(e.StateDir, "pki", name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	r := &Cluster{
		Name: name, IP: ip, EtcdPrefix: c.EtcdPrefix, CA: c.CA, Admin: c.Admin, Kubeconfig: c.Kubeconfig,
		saKeyFile: c.saKeyFile, saPubFile: c.saPubFile,
		GatewayName: c.GatewayName, GatewayUser: c.GatewayUser,
	}
	var err error
	if r.Serving, err = c.CA.issue(dir, "apiserver", certSpec{
		CommonName: "kube-apiserver",
		DNSNames:   []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPs:        []string{c.IP, ip, "10.0.0.1"},
		Server:     true,
	}); err != nil {
		return nil, err
	}
	if err := e.startAPIServer(ctx, r, append(append([]string{}, c.args...), extra...)); err != nil {
		return nil, fmt.Errorf("replica of %s on %s: %w", c.Name, ip, err)
	}
	return r, nil
}
