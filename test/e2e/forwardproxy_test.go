package e2e

import (
	"strings"
	"testing"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
)

// TestProxyThroughForwardProxies: ClusterGateways whose endpoint names a
// forward proxy (spec.endpoint.proxyURL http:// and socks5://, the real
// proxies localenv runs on loopback) reach managed-1 through the hub and the
// gateway: kubectl get, and exec over WebSocket and SPDY with stdin and exit
// codes. The proxy's own count of tunnels grew by at least one per exec and
// one for the requests, so the traffic went through it, not around it.
func TestProxyThroughForwardProxies(t *testing.T) {
	requireGateway(t)
	m := env.Managed[0]
	for _, p := range []*localenv.ForwardProxy{env.HTTPProxy, env.SOCKS5Proxy} {
		t.Run(p.Kind, func(t *testing.T) {
			gw := directGateway(uniqueName(t, "fwd-"+p.Kind), 0)
			gw.Spec.Endpoint.ProxyURL = p.URL.String()
			createGateway(t, gw)
			kc := writeKubeconfig(t, env.Hub.URL+"/apis/gateway.clustergateway.io/v1alpha1/clustergateways/"+gw.Name+"/proxy")
			before := p.Carried()

			eventually(t, "the gateway serves "+gw.Name, func() error {
				r := kubectl(t, kc, nil, "", "get", "pods", "-o", "name")
				if r.Err != nil {
					return r.Err
				}
				if !strings.Contains(r.Stdout, "pod/"+localenv.DemoPod) {
					t.Fatalf("kubectl get pods through %s: %q, want pod/%s", p.URL, r.Stdout, localenv.DemoPod)
				}
				return nil
			})
			execs := 0
			for _, proto := range streamProtocols {
				t.Run("exec/"+proto.Name, func(t *testing.T) { checkExec(t, kc, proto, m.Name) })
				execs += 3 // checkExec runs three; each upgrade dials a new connection
			}
			if grew := p.Carried() - before; grew < int64(1+execs) {
				t.Errorf("the %s proxy carried %d new tunnels, want at least %d (one for requests, one per exec): the traffic did not go through it", p.Kind, grew, 1+execs)
			}
			t.Logf("%s proxy %s: %d tunnels carried for this gateway, %d refused in all", p.Kind, p.URL, p.Carried()-before, p.Refused())
		})
	}
}
