package main

import (
	"context"
	"errors"

	"k8s.io/client-go/rest"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
)

// streamPaths are the ways to the bulk pod, side by side: direct, the bare
// reverse proxy, the gateway's port and the hub, to managed-1 (Direct) and,
// when the environment has one, to the konnectivity cluster. stop stops the
// bare proxies and the port-forwards.
func streamPaths(ctx context.Context, env *localenv.Env) (paths []*streamPath, stop func() error, err error) {
	k := &kit{ctx: ctx}
	stop = func() error {
		for _, p := range paths {
			p.close()
		}
		return k.stop()
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, stop())
		}
	}()
	pids := envPids(env)
	m1 := env.Managed[0]
	bare, err := k.bare(m1, nil, false)
	if err != nil {
		return nil, nil, err
	}
	gwAdmin, hubAdmin := env.Hub.Admin, env.Hub.Admin
	paths = []*streamPath{
		{Key: "direct", Name: "direct → managed-1", Via: "client → kube-apiserver → fake kubelet", Base: m1.URL, CAPEM: m1.CA.CertPEM, Cred: m1.GatewayUser, Upstream: m1.Name},
		{Key: "bare", Name: "bare reverse proxy → managed-1", Via: "client → httputil.ReverseProxy (HTTP/1.1 transport for upgrades) → kube-apiserver", Base: bare.URL, CAPEM: bare.CAPEM, Upstream: m1.Name, Pids: withBare(pids, bare)},
		{Key: "gateway", Name: "gateway port → cluster-1 (Direct)", Via: "client → gateway :port → kube-apiserver", Base: env.Gateway.URL + proxyPrefix(m1), CAPEM: env.Gateway.CA.CertPEM, Cred: gwAdmin, Upstream: m1.Name},
		{Key: "hub", Name: "hub → gateway → cluster-1", Via: "client → hub kube-apiserver (aggregation) → gateway → kube-apiserver", Base: env.Hub.URL + proxyPrefix(m1), CAPEM: env.Hub.CA.CertPEM, Cred: hubAdmin, Upstream: m1.Name},
	}
	if konn := env.Konnectivity; konn != nil {
		bk, err := k.bare(konn.Cluster, konn, false)
		if err != nil {
			return nil, nil, err
		}
		c := konn.Cluster
		paths = append(paths,
			&streamPath{Key: "direct3", Name: "direct → " + c.Name, Via: "client → kube-apiserver (baseline of the Konnectivity rows)", Base: c.URL, CAPEM: c.CA.CertPEM, Cred: c.GatewayUser, Upstream: c.Name, Konn: true},
			&streamPath{Key: "bare-konn", Name: "bare reverse proxy → " + c.Name + " (Konnectivity)", Via: "client → httputil.ReverseProxy → konnectivity-client's gRPC tunnel → proxy-server → proxy-agent → kube-apiserver", Base: bk.URL, CAPEM: bk.CAPEM, Upstream: c.Name, Konn: true, Pids: withBare(pids, bk)},
			&streamPath{Key: "konn", Name: "gateway port → " + c.GatewayName + " (Konnectivity)", Via: "client → gateway :port → gRPC tunnel → proxy-server → proxy-agent → kube-apiserver", Base: env.Gateway.URL + proxyPrefix(c), CAPEM: env.Gateway.CA.CertPEM, Cred: gwAdmin, Upstream: c.Name, Konn: true},
			&streamPath{Key: "hub-konn", Name: "hub → gateway → " + c.GatewayName + " (Konnectivity)", Via: "client → hub kube-apiserver → gateway → gRPC tunnel → proxy-server → proxy-agent → kube-apiserver", Base: env.Hub.URL + proxyPrefix(c), CAPEM: env.Hub.CA.CertPEM, Cred: hubAdmin, Upstream: c.Name, Konn: true},
		)
	}
	for _, p := range paths {
		if p.Pids == nil {
			p.Pids = pids
		}
		p.res = map[string]*streamResult{}
	}
	return paths, stop, nil
}

// open makes p's clients and starts its port-forward.
func (p *streamPath) open(ctx context.Context) error {
	p.cfg = &rest.Config{Host: p.Base, TLSClientConfig: rest.TLSClientConfig{CAData: p.CAPEM}}
	if p.Cred != nil {
		p.cfg.CertData, p.cfg.KeyData = p.Cred.CertPEM, p.Cred.KeyPEM
	}
	var err error
	if p.logs, err = mtlsClient(p.CAPEM, p.Cred); err != nil {
		return err
	}
	p.fwd, err = startForward(ctx, p)
	return err
}

func (p *streamPath) close() {
	if p.fwd != nil {
		p.fwd.close()
	}
	if p.logs != nil {
		p.logs.CloseIdleConnections()
	}
}

// podURL is the URL of the bulk pod's subresource sub over p.
func (p *streamPath) podURL(sub string) string {
	return p.Base + "/api/v1/namespaces/default/pods/" + localenv.BulkPod + "/" + sub
}
