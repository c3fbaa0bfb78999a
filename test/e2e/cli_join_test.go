package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// TestCLIJoinAndUse joins managed clusters with kubectl-cgw from a
// client-certificate kubeconfig, a token kubeconfig, an exec-plugin
// kubeconfig (through --service-account) and for the konnectivity tunnel,
// then drives each with the real kubectl through the kubeconfig that
// `kubectl-cgw kubeconfig` writes: get, apply (checked on the cluster
// itself) and exec.
func TestCLIJoinAndUse(t *testing.T) {
	requireGateway(t)
	hub := env.Hub.Kubeconfig
	m1, m2 := env.Managed[0], env.Managed[1]

	t.Run("client certificate", func(t *testing.T) {
		name := uniqueName(t, "cli-cert")
		deleteGatewayAtEnd(t, name)
		r := mustCgw(t, hub, "join", name, "--cluster-kubeconfig", m1.Kubeconfig)
		if !strings.Contains(r.Stdout, "clustergateway.gateway.clustergateway.io/"+name+" created") {
			t.Errorf("join printed %q, want the gateway created", r.Stdout)
		}
		gw := getGateway(t, name)
		if gw.Spec.Endpoint.Type != gatewayv1alpha1.EndpointDirect || gw.Spec.Endpoint.Address != m1.URL || string(gw.Spec.Endpoint.CABundle) != string(m1.CA.CertPEM) {
			t.Errorf("endpoint %s %s (CA from the kubeconfig: %v), want Direct %s", gw.Spec.Endpoint.Type, gw.Spec.Endpoint.Address,
				string(gw.Spec.Endpoint.CABundle) == string(m1.CA.CertPEM), m1.URL)
		}
		if gw.Spec.Credential.Type != gatewayv1alpha1.CredentialX509Certificate || gw.Status.Credential == nil ||
			!strings.Contains(gw.Status.Credential.Subject, "CN=managed-1-admin") {
			t.Errorf("credential %s, status %+v; want the kubeconfig's client certificate (CN=managed-1-admin)", gw.Spec.Credential.Type, gw.Status.Credential)
		}
		requireReady(t, gw)
		kc := writeGatewayKubeconfig(t, hub, name)
		useThroughGateway(t, kc, m1)
		if user := whoamiThrough(t, kc); user != "managed-1-admin" {
			t.Errorf("the cluster saw %q, want the kubeconfig's user managed-1-admin", user)
		}

		// Re-running join updates in place, and takes --impersonation.
		r = mustCgw(t, hub, "join", name, "--cluster-kubeconfig", m1.Kubeconfig, "--impersonation", "Caller")
		if !strings.Contains(r.Stdout, name+" configured") {
			t.Errorf("second join printed %q, want configured", r.Stdout)
		}
		if user := whoamiThrough(t, kc); user != adminName() {
			t.Errorf("with --impersonation Caller the cluster saw %q, want the hub user %q", user, adminName())
		}
	})

	t.Run("token", func(t *testing.T) {
		name := uniqueName(t, "cli-token")
		deleteGatewayAtEnd(t, name)
		id := newSAIdentity(t, m2, uniqueName(t, "cli-token-user"), "cluster-admin")
		first := id.token(t)
		mustCgw(t, hub, "join", name, "--cluster-kubeconfig", clusterKubeconfig(t, m2, "", &clientcmdapi.AuthInfo{Token: first}))
		gw := getGateway(t, name)
		if gw.Spec.Credential.Type != gatewayv1alpha1.CredentialBearerToken || string(mustSecret(t, name).Data["token"]) != first {
			t.Errorf("credential %s; want BearerToken with the kubeconfig's token stored", gw.Spec.Credential.Type)
		}
		requireReady(t, gw)
		kc := writeGatewayKubeconfig(t, hub, name)
		useThroughGateway(t, kc, m2)
		if user := whoamiThrough(t, kc); user != "system:serviceaccount:default:"+id.name {
			t.Errorf("the cluster saw %q, want the token's ServiceAccount %s", user, id.name)
		}

		// Rotation: join again with the new token.
		second := id.token(t)
		r := mustCgw(t, hub, "join", name, "--cluster-kubeconfig", clusterKubeconfig(t, m2, "", &clientcmdapi.AuthInfo{Token: second}))
		if !strings.Contains(r.Stdout, name+" configured") {
			t.Errorf("rotation printed %q, want configured", r.Stdout)
		}
		if string(mustSecret(t, name).Data["token"]) != second {
			t.Errorf("after the second join the stored token is not the new one")
		}
		if out := mustKubectl(t, kc, "get", "pods", "-o", "name"); !strings.Contains(out, "pod/demo") {
			t.Errorf("after rotation, get pods printed %q", out)
		}
	})

	t.Run("exec plugin", func(t *testing.T) {
		name := uniqueName(t, "cli-exec")
		deleteGatewayAtEnd(t, name)
		id := newSAIdentity(t, m2, uniqueName(t, "cli-exec-user"), "cluster-admin")
		dir := t.TempDir()
		tokenFile, callLog := filepath.Join(dir, "token"), filepath.Join(dir, "calls")
		if err := os.WriteFile(tokenFile, []byte(id.token(t)), 0o600); err != nil {
			t.Fatal(err)
		}
		kubeconfig := clusterKubeconfig(t, m2, "", &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
			APIVersion: "client.authentication.k8s.io/v1", Command: buildExecPlugin(t), Args: []string{tokenFile, callLog},
			InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
		}})
		// The kubeconfig works with kubectl itself, through the plugin.
		if out := mustKubectl(t, kubeconfig, "get", "pods", "-o", "name"); !strings.Contains(out, "pod/demo") || callsOf(callLog) == 0 {
			t.Fatalf("kubectl with the exec kubeconfig: %q, plugin runs %d", out, callsOf(callLog))
		}

		stderr := cgwFails(t, hub, "join", name, "--cluster-kubeconfig", kubeconfig)
		if !strings.Contains(stderr, `exec plugin`) || !strings.Contains(stderr, "--service-account --cluster-role") {
			t.Errorf("join of an exec kubeconfig said %q; want a refusal offering --service-account --cluster-role", stderr)
		}
		requireNoGateway(t, name)

		sa := uniqueName(t, "cli-exec-sa")
		removeJoinServiceAccountAtEnd(t, m2, "kube-system", sa)
		stderr = cgwFails(t, hub, "join", name, "--cluster-kubeconfig", kubeconfig, "--service-account", "--service-account-name", sa)
		if !strings.Contains(stderr, "--service-account needs --cluster-role") {
			t.Errorf("--service-account without --cluster-role said %q", stderr)
		}
		noServiceAccount(t, m2, "kube-system", sa)
		requireNoGateway(t, name)

		calls := callsOf(callLog)
		r := mustCgw(t, hub, "join", name, "--cluster-kubeconfig", kubeconfig, "--service-account", "--service-account-name", sa, "--cluster-role", "cluster-admin")
		if callsOf(callLog) == calls {
			t.Errorf("join --service-account did not run the kubeconfig's exec plugin")
		}
		for _, want := range []string{"serviceaccount kube-system/" + sa + " created", "clusterrolebinding cluster-gateway:kube-system:" + sa + " created", "ClusterRole cluster-admin", "expires"} {
			if !strings.Contains(r.Stderr, want) {
				t.Errorf("join said %q; want it to report %q", r.Stderr, want)
			}
		}
		gw := getGateway(t, name)
		if gw.Spec.Credential.Type != gatewayv1alpha1.CredentialBearerToken {
			t.Errorf("credential %s, want BearerToken", gw.Spec.Credential.Type)
		}
		requireReady(t, gw)
		direct := managedClientFor(t, m2)
		if crb, err := direct.RbacV1().ClusterRoleBindings().Get(context.Background(), "cluster-gateway:kube-system:"+sa, metav1.GetOptions{}); err != nil || crb.RoleRef.Name != "cluster-admin" {
			t.Errorf("ClusterRoleBinding on the cluster: %v, err %v; want it bound to cluster-admin", crb, err)
		}
		kc := writeGatewayKubeconfig(t, hub, name)
		useThroughGateway(t, kc, m2)
		if user := whoamiThrough(t, kc); user != "system:serviceaccount:kube-system:"+sa {
			t.Errorf("the cluster saw %q, want the ServiceAccount join created", user)
		}

		// Re-running join rotates the token and may change the role. (Not
		// "view": without a controller-manager the aggregated roles are empty.)
		reader := podReaderRole(t, m2)
		before := string(mustSecret(t, name).Data["token"])
		r = mustCgw(t, hub, "join", name, "--cluster-kubeconfig", kubeconfig, "--service-account", "--service-account-name", sa, "--cluster-role", reader)
		if !strings.Contains(r.Stderr, "ClusterRole "+reader+", was cluster-admin") || !strings.Contains(r.Stdout, name+" configured") {
			t.Errorf("join with another role: stdout %q stderr %q", r.Stdout, r.Stderr)
		}
		if string(mustSecret(t, name).Data["token"]) == before {
			t.Errorf("re-running join kept the same token; want a new one")
		}
		if out := mustKubectl(t, kc, "get", "pods", "-o", "name"); !strings.Contains(out, "pod/demo") {
			t.Errorf("as a pod reader, get pods printed %q", out)
		}
		res := kubectl(t, kc, nil, "", "create", "configmap", uniqueName(t, "denied"))
		if res.Err == nil || !strings.Contains(res.Stderr, "forbidden") || !strings.Contains(res.Stderr, "system:serviceaccount:kube-system:"+sa) {
			t.Errorf("as a pod reader, create configmap: err %v, stderr %q; want Forbidden for the ServiceAccount", res.Err, res.Stderr)
		}
	})

	t.Run("konnectivity", func(t *testing.T) {
		k := requireKonnectivity(t)
		c := k.Cluster
		name := uniqueName(t, "cli-konn")
		deleteGatewayAtEnd(t, name)
		// The serving certificate is verified as kubernetes.default.svc, a
		// name every kube-apiserver's certificate has, as for a cluster whose
		// address only the tunnel knows.
		mustCgw(t, hub, "join", name, "--cluster-kubeconfig", c.Kubeconfig, "--konnectivity", "--address", c.URL, "--server-name", "kubernetes.default.svc")
		gw := getGateway(t, name)
		if ep := gw.Spec.Endpoint; ep.Type != gatewayv1alpha1.EndpointKonnectivity || ep.Address != c.URL || ep.ServerName != "kubernetes.default.svc" {
			t.Errorf("endpoint %s %s %q, want Konnectivity %s verified as kubernetes.default.svc", ep.Type, ep.Address, ep.ServerName, c.URL)
		}
		requireReady(t, gw)
		const agentDials = "konnectivity_network_proxy_agent_dial_duration_seconds_count"
		before := mustScrape(t, k.AgentMetricsURL).Sum(agentDials)
		kc := writeGatewayKubeconfig(t, hub, name)
		if out := mustKubectl(t, kc, "get", "pods", "-o", "name"); !strings.Contains(out, "pod/demo") {
			t.Errorf("get pods through the tunnel printed %q", out)
		}
		if after := mustScrape(t, k.AgentMetricsURL).Sum(agentDials); after <= before {
			t.Errorf("the agent dialled %v times before and %v after the first request of a new gateway; want it reached through the tunnel", before, after)
		}
	})
}

// podReaderRole creates a ClusterRole on c that may only read pods.
func podReaderRole(t *testing.T, c *localenv.Cluster) string {
	t.Helper()
	name := uniqueName(t, "cli-pod-reader")
	direct := managedClientFor(t, c)
	cr := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}},
	}
	if _, err := direct.RbacV1().ClusterRoles().Create(context.Background(), cr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = direct.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return name
}

func getGateway(t *testing.T, name string) *gatewayv1alpha1.ClusterGateway {
	t.Helper()
	gw, err := gatewayClient(t, env.Hub.Kubeconfig).GatewayV1alpha1().ClusterGateways().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get ClusterGateway %s: %v", name, err)
	}
	return gw
}

func requireReady(t *testing.T, gw *gatewayv1alpha1.ClusterGateway) {
	t.Helper()
	if c := readyCondition(gw); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("ClusterGateway %s Ready = %+v, want True", gw.Name, c)
	}
}

func managedClientFor(t *testing.T, c *localenv.Cluster) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// writeGatewayKubeconfig runs `kubectl-cgw kubeconfig NAME -o FILE` as the
// user of hubKubeconfig and returns FILE.
func writeGatewayKubeconfig(t *testing.T, hubKubeconfig, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name+".kubeconfig")
	mustCgw(t, hubKubeconfig, "kubeconfig", name, "-o", p)
	return p
}

// useThroughGateway drives cluster c with kubectl through kc: get, apply
// (the ConfigMap must land on c itself) and exec (hostname names c).
func useThroughGateway(t *testing.T, kc string, c *localenv.Cluster) {
	t.Helper()
	if out := mustKubectl(t, kc, "get", "pods", "-o", "name"); !strings.Contains(out, "pod/demo") {
		t.Errorf("get pods through the gateway printed %q, want pod/demo", out)
	}
	cm := uniqueName(t, "cli-applied")
	out := kubectlStdin(t, kc, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: "+cm+"\n  namespace: default\ndata:\n  via: gateway\n", "apply", "-f", "-")
	if !strings.Contains(out, "configmap/"+cm+" created") {
		t.Errorf("apply printed %q", out)
	}
	direct := managedClientFor(t, c)
	got, err := direct.CoreV1().ConfigMaps("default").Get(context.Background(), cm, metav1.GetOptions{})
	if err != nil || got.Data["via"] != "gateway" {
		t.Errorf("ConfigMap %s on %s directly: %v, err %v; want data via=gateway", cm, c.Name, got, err)
	}
	_ = direct.CoreV1().ConfigMaps("default").Delete(context.Background(), cm, metav1.DeleteOptions{})
	checkExec(t, kc, streamProtocols[0], c.Name)
}

var whoamiUser = regexp.MustCompile(`(?m)^Username\s+(\S+)`)

// whoamiThrough is the user the managed cluster sees for requests through kc.
func whoamiThrough(t *testing.T, kc string) string {
	t.Helper()
	out := mustKubectl(t, kc, "auth", "whoami")
	m := whoamiUser.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("kubectl auth whoami printed %q", out)
	}
	return m[1]
}
