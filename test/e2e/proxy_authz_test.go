package e2e

import (
	"fmt"
	"strings"
	"testing"
)

// TestProxyAuthorizeSubpath runs the gateway with --authorize-proxy-subpath:
// a hub user allowed to use the proxy still needs the hub's permission for
// the inner request (verb, resource, namespace, name or non-resource path).
// It restarts the gateway, so it does not run in parallel.
func TestProxyAuthorizeSubpath(t *testing.T) {
	requireGateway(t)
	restartGateway(t, append(append([]string{}, env.GatewayArgs...), "--authorize-proxy-subpath"))
	t.Cleanup(func() { restartGateway(t, nil) })

	admin := env.Hub.Kubeconfig
	bob := env.Bob.Kubeconfig
	binding := uniqueName(t, "bob-proxy")
	mustKubectl(t, admin, "create", "clusterrolebinding", binding, "--clusterrole=cluster-gateway:proxy", "--user="+env.Bob.Name)
	t.Cleanup(func() { _ = kubectl(t, admin, nil, "", "delete", "clusterrolebinding", binding) })

	base := "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/" + env.Managed[0].GatewayName + "/proxy"
	// Allowed to use the proxy, but not to list namespaces on the hub: refused by the gateway.
	eventually(t, "bob's inner request to be refused by the gateway", func() error {
		r := kubectl(t, bob, nil, "", "get", "--raw", base+"/api/v1/namespaces")
		if r.Err == nil || !strings.Contains(r.Stderr, "through the gateway") || !strings.Contains(r.Stderr, "list namespaces") {
			return fmt.Errorf("want 403 naming the inner request, got err=%v stdout=%.200s stderr=%s", r.Err, r.Stdout, r.Stderr)
		}
		return nil
	})
	// A non-resource path is authorized as such: every user may read /version
	// on the hub (system:public-info-viewer), nobody but admins /metrics.
	if r := kubectl(t, bob, nil, "", "get", "--raw", base+"/version"); r.Err != nil {
		t.Fatalf("bob may get /version on the hub, but not through the gateway: %s", r.Stderr)
	}
	if r := kubectl(t, bob, nil, "", "get", "--raw", base+"/metrics"); r.Err == nil || !strings.Contains(r.Stderr, "/metrics") {
		t.Fatalf("bob may not get /metrics on the hub, yet the gateway let it through (err=%v): %.200s", r.Err, r.Stdout)
	}

	// With the hub's permission for the inner request, it goes through.
	role := uniqueName(t, "ns-reader")
	mustKubectl(t, admin, "create", "clusterrole", role, "--verb=list", "--resource=namespaces")
	t.Cleanup(func() { _ = kubectl(t, admin, nil, "", "delete", "clusterrole", role) })
	mustKubectl(t, admin, "create", "clusterrolebinding", role, "--clusterrole="+role, "--user="+env.Bob.Name)
	t.Cleanup(func() { _ = kubectl(t, admin, nil, "", "delete", "clusterrolebinding", role) })
	eventually(t, "bob's inner request to be allowed", func() error {
		r := kubectl(t, bob, nil, "", "get", "--raw", base+"/api/v1/namespaces")
		if r.Err != nil || !strings.Contains(r.Stdout, `"NamespaceList"`) {
			return fmt.Errorf("err=%v stderr=%s", r.Err, r.Stderr)
		}
		return nil
	})
	// ...but only that: reading a Secret in the managed cluster is still refused.
	if r := kubectl(t, bob, nil, "", "get", "--raw", base+"/api/v1/namespaces/kube-system/secrets"); r.Err == nil {
		t.Fatalf("bob listed secrets in the managed cluster without the hub's permission: %.200s", r.Stdout)
	}
}
