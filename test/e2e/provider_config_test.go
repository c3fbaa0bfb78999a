package e2e

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// TestProviderConfigNeedsUse plays a writer who may patch ClusterGateways
// but not use a credential provider: changing a Provider gateway's
// provider.config (what the provider mints a credential for) by merge patch,
// JSON patch or server-side apply is refused 403 and changes nothing; a
// label, and an apply of the same config with its keys in another order,
// are allowed; a writer who may use the provider changes the config both
// ways. Naming the provider is what the config needs.
func TestProviderConfigNeedsUse(t *testing.T) {
	requireGateway(t)
	t.Parallel()
	provider := uniqueName(t, "cfg-provider")
	name := uniqueName(t, "provider-config")
	m := env.Managed[0]
	gw := directGateway(name, 0)
	gw.Spec.Credential = gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialProvider, Provider: &gatewayv1alpha1.ProviderReference{
		Name: provider, Config: &runtime.RawExtension{Raw: []byte(`{"region":"eu-west-1","clusterName":"prod"}`)}}}
	createGateway(t, gw)

	writer := func(prefix string, use bool) string {
		u := newHubUser(t, prefix)
		role := uniqueName(t, prefix)
		bind(t, "clusterrole", role, "--verb=get,list,watch,create,update,patch", "--resource=clustergateways.gateway.clustergateway.io")
		bind(t, "clusterrolebinding", role, "--clusterrole="+role, "--user="+u.Name)
		if use {
			// kubectl create clusterrole checks the resource is served; this one never is.
			kubectlStdin(t, env.Hub.Kubeconfig, fmt.Sprintf(`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":%q},`+
				`"rules":[{"apiGroups":["gateway.clustergateway.io"],"resources":["credentialproviders"],"resourceNames":[%q],"verbs":["use"]}]}`, role+"-use", provider),
				"apply", "-f", "-")
			t.Cleanup(func() { _ = kubectl(t, env.Hub.Kubeconfig, nil, "", "delete", "clusterrole", role+"-use") })
			bind(t, "clusterrolebinding", role+"-use", "--clusterrole="+role+"-use", "--user="+u.Name)
		}
		return u.Kubeconfig
	}
	mallory, alice := writer("mallory", false), writer("alice", true)
	config := func() map[string]any {
		t.Helper()
		var c map[string]any
		if err := json.Unmarshal(getGateway(t, name).Spec.Credential.Provider.Config.Raw, &c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	applied := func(cfg string) string {
		return fmt.Sprintf(`{"apiVersion":"gateway.clustergateway.io/v1alpha1","kind":"ClusterGateway","metadata":{"name":%q},"spec":{"endpoint":{"address":%q},"credential":{"type":"Provider","provider":{"name":%q,"config":%s}}}}`,
			name, m.URL, provider, cfg)
	}
	changes := []struct {
		how, stdin string
		args       []string
	}{
		{"a merge patch", "", []string{"patch", "clustergateway", name, "--type=merge", "-p", `{"spec":{"credential":{"provider":{"config":{"clusterName":"admin"}}}}}`}},
		{"a JSON patch", "", []string{"patch", "clustergateway", name, "--type=json", "-p", `[{"op":"replace","path":"/spec/credential/provider/config/clusterName","value":"admin"}]`}},
		{"a server-side apply", applied(`{"clusterName":"admin","region":"eu-west-1"}`), []string{"apply", "--server-side", "--force-conflicts", "--field-manager=mallory", "-f", "-"}},
	}
	want := map[string]any{"clusterName": "prod", "region": "eu-west-1"}
	for _, c := range changes {
		r := kubectl(t, mallory, nil, c.stdin, c.args...)
		if r.Err == nil || !strings.Contains(r.Stderr, "Forbidden") || !strings.Contains(r.Stderr, "needs permission to use it") {
			t.Errorf("mallory changes provider.config by %s: err=%v stdout=%s stderr=%s; want 403", c.how, r.Err, r.Stdout, r.Stderr)
		}
		if got := config(); !reflect.DeepEqual(got, want) {
			t.Fatalf("after mallory's refused %s the config is %v, want %v", c.how, got, want)
		}
	}
	// What decides nothing the provider is given: allowed.
	mustKubectl(t, mallory, "label", "clustergateway", name, "team=blue")
	if r := kubectl(t, mallory, nil, applied(`{"clusterName":"prod","region":"eu-west-1"}`), "apply", "--server-side", "--force-conflicts", "--field-manager=mallory", "-f", "-"); r.Err != nil {
		t.Errorf("mallory applies the same config, its keys in another order: %v: %s", r.Err, r.Stderr)
	}
	if got := config(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after mallory's allowed writes the config is %v, want %v", got, want)
	}

	// Who may use the provider may change what it mints.
	for i, c := range changes {
		if c.how == "a JSON patch" {
			continue
		}
		want = map[string]any{"clusterName": fmt.Sprintf("admin-%d", i), "region": "eu-west-1"}
		args := append([]string{}, c.args...)
		stdin := strings.ReplaceAll(c.stdin, `"admin"`, fmt.Sprintf(`"admin-%d"`, i))
		for j, a := range args {
			args[j] = strings.ReplaceAll(a, `"admin"`, fmt.Sprintf(`"admin-%d"`, i))
		}
		if r := kubectl(t, alice, nil, stdin, args...); r.Err != nil {
			t.Fatalf("alice, who may use %s, changes its config by %s: %v: %s", provider, c.how, r.Err, r.Stderr)
		}
		if got := config(); !reflect.DeepEqual(got, want) {
			t.Fatalf("after alice's %s the config is %v, want %v", c.how, got, want)
		}
	}
}
