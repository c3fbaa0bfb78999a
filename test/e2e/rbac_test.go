package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RBAC tests: the hub authorizes ClusterGateway requests (the gateway
// delegates to it). alice has no RBAC; bob is bound to
// cluster-gateway:viewer (config/user-roles.yaml).

// TestRBACAliceForbidden: a user without RBAC may not list, get or watch.
func TestRBACAliceForbidden(t *testing.T) {
	requireGateway(t)
	t.Parallel()
	stderr := kubectlFails(t, env.Alice.Kubeconfig, "get", "clustergateways")
	if !strings.Contains(stderr, "Forbidden") || !strings.Contains(stderr, `User "alice" cannot list resource "clustergateways" in API group "gateway.clustergateway.io"`) {
		t.Errorf("alice kubectl get clustergateways: %s", stderr)
	}

	client := gatewayClient(t, env.Alice.Kubeconfig).GatewayV1alpha1().ClusterGateways()
	_, err := client.List(context.Background(), metav1.ListOptions{})
	requireStatusCode(t, "alice list", err, http.StatusForbidden)
	_, err = client.Get(context.Background(), env.Managed[0].GatewayName, metav1.GetOptions{})
	requireStatusCode(t, "alice get", err, http.StatusForbidden)
	_, err = client.Watch(context.Background(), metav1.ListOptions{})
	requireStatusCode(t, "alice watch", err, http.StatusForbidden)
}

// TestRBACBobViewer: the viewer role reads but does not write, and does not
// reach managed clusters through the proxy.
func TestRBACBobViewer(t *testing.T) {
	requireGateway(t)
	t.Parallel()
	bob := env.Bob.Kubeconfig
	name := env.Managed[0].GatewayName

	out := mustKubectl(t, bob, "get", "clustergateways", "-o", "name")
	for _, m := range env.Managed {
		if !strings.Contains(out, "clustergateway.gateway.clustergateway.io/"+m.GatewayName) {
			t.Errorf("bob's list lacks %s:\n%s", m.GatewayName, out)
		}
	}
	out = mustKubectl(t, bob, "get", "cgw", name, "-o", "yaml")
	requireNoMaterial(t, "bob get -o yaml", out, env.Managed[0].GatewayUser.CertPEM, env.Managed[0].GatewayUser.KeyPEM)

	client := gatewayClient(t, bob).GatewayV1alpha1().ClusterGateways()
	if _, err := client.Get(context.Background(), name, metav1.GetOptions{}); err != nil {
		t.Errorf("bob get %s: %v", name, err)
	}
	w, err := client.Watch(context.Background(), metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Errorf("bob watch: %v", err)
	} else {
		w.Stop()
	}

	// Writes are forbidden, and nothing is written.
	newName := uniqueName(t, "e2e-bob")
	cleanupGateway(t, newName)
	_, err = client.Create(context.Background(), tokenGateway(newName, "https://127.0.0.9:6443", randomToken(t)), metav1.CreateOptions{})
	requireStatusCode(t, "bob create", err, http.StatusForbidden)
	requireNoSecret(t, newName)
	r := kubectl(t, bob, nil, tokenGatewayYAML(newName, "https://127.0.0.9:6443", nil, randomToken(t)), "create", "-f", "-")
	if r.Err == nil || !strings.Contains(r.Stderr, `User "bob" cannot create resource "clustergateways"`) {
		t.Errorf("bob kubectl create: err %v, stderr %s", r.Err, r.Stderr)
	}
	stderr := kubectlFails(t, bob, "delete", "cgw", name)
	if !strings.Contains(stderr, "Forbidden") {
		t.Errorf("bob kubectl delete: %s", stderr)
	}
	if out := kubectl(t, bob, nil, "", "auth", "can-i", "create", "clustergateways"); strings.TrimSpace(out.Stdout) != "no" {
		t.Errorf("bob auth can-i create clustergateways = %q", out.Stdout)
	}

	// The proxy subresource needs cluster-gateway:proxy, which bob lacks.
	stderr = kubectlFails(t, bob, "get", "--raw", "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/"+name+"/proxy/version")
	if !strings.Contains(stderr, "Forbidden") {
		t.Errorf("bob proxy: %s", stderr)
	}
}

// requireStatusCode fails unless err is an API error with code.
func requireStatusCode(t *testing.T, what string, err error, code int32) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: succeeded, want HTTP %d", what, code)
		return
	}
	status, ok := err.(apierrors.APIStatus)
	if !ok {
		t.Errorf("%s: %v (%T), want an API status with code %d", what, err, err, code)
		return
	}
	if got := status.Status().Code; got != code {
		t.Errorf("%s: code %d (%v), want %d", what, got, err, code)
	}
}
