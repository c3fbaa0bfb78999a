package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// Smoke tests prove the stack without the gateway: the hub is up with
// config/ applied, and exec, port-forward and logs -f work directly against
// each managed cluster through its fake kubelet, with the real kubectl.

func TestSmokeHubReady(t *testing.T) {
	if out := mustKubectl(t, env.Hub.Kubeconfig, "get", "--raw", "/readyz"); strings.TrimSpace(out) != "ok" {
		t.Fatalf("hub /readyz = %q, want ok", out)
	}
	// The aggregation layer is configured: the hub publishes it for extension servers.
	out := mustKubectl(t, env.Hub.Kubeconfig, "get", "configmap", "-n", "kube-system", "extension-apiserver-authentication",
		"-o", "jsonpath={.data.requestheader-allowed-names}")
	if !strings.Contains(out, "front-proxy-client") {
		t.Errorf("requestheader-allowed-names = %q, want front-proxy-client", out)
	}
}

func TestSmokeKubectlOnEveryCluster(t *testing.T) {
	for _, kc := range append([]string{env.Hub.Kubeconfig}, managedKubeconfigs()...) {
		if out := mustKubectl(t, kc, "get", "namespace", "default", "-o", "name"); strings.TrimSpace(out) != "namespace/default" {
			t.Errorf("%s: get namespace default = %q", kc, out)
		}
	}
	for _, c := range env.Managed {
		out := mustKubectl(t, c.Kubeconfig, "get", "pod", "demo", "-o", "jsonpath={.spec.nodeName} {.status.phase}")
		if out != "fake-node Running" {
			t.Errorf("%s: pod demo = %q, want \"fake-node Running\"", c.Name, out)
		}
	}
}

// TestSmokeConfigRBAC checks that config/ was applied with least privilege:
// the gateway's ServiceAccount manages Secrets only in its own namespace.
// It asks the hub with SubjectAccessReviews, which need no gateway running
// (kubectl auth can-i would need the resource in discovery).
func TestSmokeConfigRBAC(t *testing.T) {
	const sa = "system:serviceaccount:cluster-gateway-system:cluster-gateway"
	saGroups := []string{"system:serviceaccounts", "system:serviceaccounts:cluster-gateway-system", "system:authenticated"}
	users := []string{"system:authenticated"}
	const gw = "gateway.clustergateway.io"
	cases := []struct {
		user   string
		groups []string
		attrs  resourceAttributes
		want   bool
	}{
		{sa, saGroups, resourceAttributes{Verb: "watch", Resource: "secrets", Namespace: "cluster-gateway-system"}, true},
		{sa, saGroups, resourceAttributes{Verb: "delete", Resource: "secrets", Namespace: "cluster-gateway-system"}, true},
		{sa, saGroups, resourceAttributes{Verb: "get", Resource: "secrets", Namespace: "default"}, false},
		{sa, saGroups, resourceAttributes{Verb: "get", Resource: "configmaps", Name: "extension-apiserver-authentication", Namespace: "kube-system"}, true},
		{sa, saGroups, resourceAttributes{Verb: "create", Group: "authentication.k8s.io", Resource: "tokenreviews"}, true},
		{sa, saGroups, resourceAttributes{Verb: "create", Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}, true},
		{sa, saGroups, resourceAttributes{Verb: "get", Group: gw, Resource: "clustergateways", Subresource: "proxy"}, false},
		{"bob", users, resourceAttributes{Verb: "list", Group: gw, Resource: "clustergateways"}, true},
		{"bob", users, resourceAttributes{Verb: "get", Group: gw, Resource: "clustergateways", Subresource: "proxy"}, false},
		{"alice", users, resourceAttributes{Verb: "list", Group: gw, Resource: "clustergateways"}, false},
	}
	for _, c := range cases {
		if got := canI(t, c.user, c.groups, c.attrs); got != c.want {
			t.Errorf("%s may %+v: %v, want %v", c.user, c.attrs, got, c.want)
		}
	}
	// The users' own kubeconfigs authenticate as them.
	for _, u := range []string{"alice", "bob"} {
		kc := map[string]string{"alice": env.Alice.Kubeconfig, "bob": env.Bob.Kubeconfig}[u]
		if got := mustKubectl(t, kc, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"); got != u {
			t.Errorf("%s's kubeconfig authenticates as %q", u, got)
		}
	}
}

type resourceAttributes struct {
	Verb        string `json:"verb"`
	Group       string `json:"group,omitempty"`
	Resource    string `json:"resource"`
	Subresource string `json:"subresource,omitempty"`
	Name        string `json:"name,omitempty"`
	Namespace   string `json:"namespace,omitempty"`
}

// canI asks the hub, as its admin, whether user may do attrs.
func canI(t *testing.T, user string, groups []string, attrs resourceAttributes) bool {
	t.Helper()
	sar, err := json.Marshal(map[string]any{
		"apiVersion": "authorization.k8s.io/v1",
		"kind":       "SubjectAccessReview",
		"spec":       map[string]any{"user": user, "groups": groups, "resourceAttributes": attrs},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := kubectl(t, env.Hub.Kubeconfig, nil, string(sar), "create", "-f", "-", "-o", "jsonpath={.status.allowed}")
	if r.Err != nil {
		t.Fatalf("SubjectAccessReview: %v\nstderr: %s", r.Err, r.Stderr)
	}
	return r.Stdout == "true"
}

func TestSmokeExecDirect(t *testing.T) {
	for _, p := range streamProtocols {
		for _, c := range env.Managed {
			t.Run(p.Name+"/"+c.Name, func(t *testing.T) { checkExec(t, c.Kubeconfig, p, c.Name) })
		}
	}
}

func TestSmokePortForwardDirect(t *testing.T) {
	for _, p := range streamProtocols {
		t.Run(p.Name, func(t *testing.T) { checkPortForward(t, env.Managed[0].Kubeconfig, p) })
	}
}

func TestSmokeLogsFollowDirect(t *testing.T) {
	c := env.Managed[0]
	checkLogsFollow(t, c.Kubeconfig, c.Name)
}

func managedKubeconfigs() []string {
	var kcs []string
	for _, c := range env.Managed {
		kcs = append(kcs, c.Kubeconfig)
	}
	return kcs
}

// TestSmokeGatewayRestart checks the harness can restart the gateway with
// other flags, as gateway tests do, and that the hub reaches it again.
func TestSmokeGatewayRestart(t *testing.T) {
	requireGateway(t)
	proc := env.Gateway.Process
	pid := proc.Pid()
	if err := env.StopGateway(); err != nil {
		t.Fatal(err)
	}
	// Graceful shutdown: SIGTERM alone ends it, with status 0 (no SIGKILL).
	if err := proc.WaitErr(); err != nil {
		t.Errorf("the gateway did not shut down cleanly on SIGTERM: %v\n%s", err, proc.LogTail(20))
	}
	if err := env.StartGateway(context.Background(), append(append([]string{}, env.GatewayArgs...), "--v=2")); err != nil {
		t.Fatalf("restart the gateway: %v", err)
	}
	if env.Gateway.Process.Pid() == pid {
		t.Fatalf("gateway pid unchanged after restart")
	}
	out := mustKubectl(t, env.Hub.Kubeconfig, "get", "clustergateways", "-o", "name")
	for _, c := range env.Managed {
		if !strings.Contains(out, "clustergateway.gateway.clustergateway.io/"+c.GatewayName) {
			t.Errorf("after restart, get clustergateways = %q, missing %s", out, c.GatewayName)
		}
	}
}
