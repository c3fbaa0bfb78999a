package e2e

import (
	"context"
	"net"
	"strconv"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestGatewayMovesOffATakenPort: when another socket holds the gateway's
// port at a start (chosen when the environment was made; seen once in a
// run), the environment starts the gateway on a new port and points the
// hub's Service and APIService there, instead of failing the whole suite.
// It restarts the gateway, so it does not run in parallel with other tests.
func TestGatewayMovesOffATakenPort(t *testing.T) {
	requireGateway(t)
	if err := env.StopGateway(); err != nil {
		t.Fatalf("stop the gateway: %v", err)
	}
	old := env.Gateway.Port
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(old)))
	if err != nil {
		t.Fatalf("take the gateway's port %d: %v", old, err)
	}
	defer l.Close()
	if err := env.StartGateway(context.Background(), nil); err != nil {
		t.Fatalf("start the gateway with its port %d taken: %v", old, err)
	}
	if env.Gateway.Port == old {
		t.Fatalf("the gateway still has port %d, which this test holds", old)
	}
	// StartGateway waited for the hub to serve the API; list through it once
	// more, as a user would.
	if _, err := gatewayClient(t, env.Hub.Kubeconfig).GatewayV1alpha1().ClusterGateways().List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatalf("list ClusterGateways through the hub after the move to port %d: %v", env.Gateway.Port, err)
	}
}
