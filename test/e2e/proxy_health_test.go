package e2e

import (
	"encoding/json"
	"net"
	"strings"
	"testing"

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// TestHealthSubresource probes clusters through the gateway with
// clustergateways/{name}/health: a reachable cluster is healthy, an
// unreachable one says why, and the viewer role may read it.
func TestHealthSubresource(t *testing.T) {
	requireGateway(t)
	t.Parallel()
	l, err := net.Listen("tcp", testIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	down := directGateway(uniqueName(t, "down"), 0)
	down.Spec.Endpoint.Address = "https://" + addr
	createGateway(t, down)

	health := func(kubeconfig, name string) gatewayv1alpha1.ClusterGatewayHealth {
		t.Helper()
		out := mustKubectl(t, kubeconfig, "get", "--raw", "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/"+name+"/health")
		var h gatewayv1alpha1.ClusterGatewayHealth
		if err := json.Unmarshal([]byte(out), &h); err != nil {
			t.Fatalf("health of %s: %v\n%s", name, err, out)
		}
		return h
	}
	for _, c := range env.Managed {
		// bob holds cluster-gateway:viewer, which includes health.
		if h := health(env.Bob.Kubeconfig, c.GatewayName); !h.Healthy || h.Code != 200 || h.Kind != "ClusterGatewayHealth" {
			t.Errorf("health of %s: %+v, want healthy with code 200", c.GatewayName, h)
		}
	}
	if h := health(env.Hub.Kubeconfig, down.Name); h.Healthy || !strings.Contains(h.Message, "connection refused") {
		t.Errorf("health of an unreachable cluster: %+v, want unhealthy saying connection refused", h)
	}
	if r := kubectl(t, env.Hub.Kubeconfig, nil, "", "get", "--raw", "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/no-such/health"); r.Err == nil || !strings.Contains(r.Stderr, "NotFound") {
		t.Errorf("health of an unknown gateway: err=%v %s", r.Err, r.Stderr)
	}
	if r := kubectl(t, env.Alice.Kubeconfig, nil, "", "get", "--raw", "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/"+env.Managed[0].GatewayName+"/health"); r.Err == nil || !strings.Contains(r.Stderr, "Forbidden") {
		t.Errorf("alice (no RBAC) read health: err=%v %s", r.Err, r.Stderr)
	}
}
