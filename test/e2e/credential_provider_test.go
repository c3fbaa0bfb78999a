package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// providerScript prints an ExecCredential with the token in $TOKEN_FILE,
// after writing its whole environment to $ENV_DUMP.
const providerScript = `#!/bin/sh
/usr/bin/env > "$ENV_DUMP"
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s"}}' "$(/bin/cat "$TOKEN_FILE")"
`

// brokenScript fails, printing what would be a credential.
const brokenScript = `#!/bin/sh
echo "provider-secret-output"; echo "provider-secret-stderr" >&2; exit 3
`

// TestCredentialProvider runs a gateway with a providers file: a Provider
// gateway reaches its cluster with the token its provider prints (a
// ServiceAccount token of the managed cluster), the provider gets only its
// configured environment and the gateway's config, a refused token makes
// the provider run again without a new pool entry, and a failing provider
// makes its gateway not Ready (ProviderFailed, without its output) and its
// requests 503. It restarts the gateway, so it does not run in parallel.
func TestCredentialProvider(t *testing.T) {
	requireGateway(t)
	ctx := context.Background()
	direct := managedClient(t, 0)
	first, second := uniqueName(t, "prov-a"), uniqueName(t, "prov-b")
	tokenFirst, tokenSecond := providerServiceAccount(t, direct, first), providerServiceAccount(t, direct, second)

	dir := t.TempDir()
	tokenFile, envDump := filepath.Join(dir, "token"), filepath.Join(dir, "env")
	if err := os.WriteFile(tokenFile, []byte(tokenFirst), 0o600); err != nil {
		t.Fatal(err)
	}
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	file := filepath.Join(dir, "providers.yaml")
	providers := fmt.Sprintf(`apiVersion: gateway.clustergateway.io/v1alpha1
kind: CredentialProviderConfig
providers:
- name: sa-token
  exec:
    apiVersion: client.authentication.k8s.io/v1
    command: %s
    env:
    - {name: TOKEN_FILE, value: %s}
    - {name: ENV_DUMP, value: %s}
- name: broken
  timeout: 5s
  exec:
    apiVersion: client.authentication.k8s.io/v1
    command: %s
`, script("provider", providerScript), tokenFile, envDump, script("broken", brokenScript))
	if err := os.WriteFile(file, []byte(providers), 0o600); err != nil {
		t.Fatal(err)
	}
	// At -v=10 (client-go logs exec plugin runs and headers) the provider's
	// output must still be nowhere in the gateway's log.
	// A variable of the gateway's environment that must not reach the provider.
	t.Setenv("GATEWAY_ONLY_SECRET", "gateway-env-secret")
	restartGateway(t, append(append([]string{}, env.GatewayArgs...), "--credential-providers-file="+file, "-v=10"))
	t.Cleanup(func() { restartGateway(t, nil) })

	gw := directGateway(uniqueName(t, "provider"), 0)
	gw.Spec.Credential = gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialProvider, Provider: &gatewayv1alpha1.ProviderReference{
		Name: "sa-token", Config: &runtime.RawExtension{Raw: []byte(`{"account":"e2e-provider-config"}`)},
	}}
	createGateway(t, gw)
	_, via := viaHub(t, gw.Name)
	whoami := func() (string, error) { return seenUser(ctx, via) }
	user := func(sa string) string { return "system:serviceaccount:default:" + sa }

	eventually(t, "namespaces listed through a Provider gateway (once RBAC knows its binding)", func() error {
		_, err := via.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		return err
	})
	if got, err := whoami(); err != nil || got != user(first) {
		t.Fatalf("the managed cluster saw %q (%v), want the provider's token's %q", got, err, user(first))
	}
	raw, err := os.ReadFile(envDump)
	if err != nil {
		t.Fatalf("the provider wrote no environment: %v", err)
	}
	for _, leak := range []string{"GATEWAY_ONLY_SECRET", "gateway-env-secret", "KUBE_BIN=", "HOME="} {
		if strings.Contains(string(raw), leak) {
			t.Errorf("the provider's environment has the gateway's %s:\n%s", leak, raw)
		}
	}
	for _, want := range []string{"TOKEN_FILE=" + tokenFile, "KUBERNETES_EXEC_INFO=", `"account":"e2e-provider-config"`, env.Managed[0].URL} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("the provider's environment lacks %s:\n%s", want, raw)
		}
	}
	eventually(t, "status.credential of the Provider gateway", func() error {
		cur := getGateway(t, gw.Name)
		if c := readyCondition(cur); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("Ready = %+v", c)
		}
		if c := cur.Status.Credential; c == nil || c.Source != "Provider sa-token" || c.LastRotationTime == nil {
			return fmt.Errorf("status.credential = %+v, want source \"Provider sa-token\" and a rotation time", c)
		}
		return nil
	})
	base := gatewayMetrics(t)

	// The cluster stops accepting the first token (its ServiceAccount goes):
	// its 401 makes the provider run again, and it prints the second token.
	if err := os.WriteFile(tokenFile, []byte(tokenSecond), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := direct.CoreV1().ServiceAccounts("default").Delete(ctx, first, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the provider's new token after a 401", func() error {
		if got, err := whoami(); err != nil || got != user(second) {
			return fmt.Errorf("the managed cluster saw %q (%v), want %q", got, err, user(second))
		}
		return nil
	})
	m := gatewayMetrics(t)
	if got := m.Sum("cluster_gateway_pool_entry_creations_total") - base.Sum("cluster_gateway_pool_entry_creations_total"); got != 0 {
		t.Errorf("a provider's new token created %v pool entries, want 0 (a token is not part of the transport)", got)
	}
	if got := m[`cluster_gateway_credential_rotations_total{source_kind="Provider"}`]; got < 1 {
		t.Errorf("cluster_gateway_credential_rotations_total{source_kind=\"Provider\"} = %v after the provider's new token, want >= 1", got)
	}
	if got := m[`cluster_gateway_credential_provider_duration_seconds_count{provider="sa-token"}`]; got < 2 {
		t.Errorf("cluster_gateway_credential_provider_duration_seconds_count{provider=\"sa-token\"} = %v after two runs, want >= 2", got)
	}

	// A failing provider: not Ready, ProviderFailed, its output nowhere; a 503.
	bad := directGateway(uniqueName(t, "provider-broken"), 0)
	bad.Spec.Credential = gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialProvider, Provider: &gatewayv1alpha1.ProviderReference{Name: "broken"}}
	createGateway(t, bad)
	code, body := hubGet(t, "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/"+bad.Name+"/proxy/api/v1/namespaces")
	if code != http.StatusServiceUnavailable {
		t.Errorf("a request through a gateway whose provider fails got %d, want 503: %s", code, body)
	}
	eventually(t, "Ready False ProviderFailed", func() error {
		c := readyCondition(getGateway(t, bad.Name))
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != gatewayv1alpha1.ReasonProviderFailed {
			return fmt.Errorf("Ready = %+v, want False ProviderFailed", c)
		}
		if !strings.Contains(c.Message, `credential provider "broken"`) {
			return fmt.Errorf("Ready's message does not name the provider: %s", c.Message)
		}
		return nil
	})
	out := mustKubectl(t, env.Hub.Kubeconfig, "get", "clustergateway", bad.Name, "-o", "yaml")
	logs, _ := os.ReadFile(env.Gateway.Process.LogPath)
	for what, text := range map[string]string{"the response": body, "the gateway object": out, "the gateway's log": string(logs)} {
		if strings.Contains(text, "provider-secret") {
			t.Errorf("%s holds the provider's output", what)
		}
	}
}

// providerServiceAccount creates ServiceAccount name, a cluster-admin, on
// managed cluster cs and returns a token of it.
func providerServiceAccount(t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: "default"}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
		_ = cs.CoreV1().ServiceAccounts("default").Delete(ctx, name, metav1.DeleteOptions{})
	})
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest on the managed cluster: %v", err)
	}
	return tr.Status.Token
}

// seenUser is the user the managed cluster sees for requests of cs.
func seenUser(ctx context.Context, cs kubernetes.Interface) (string, error) {
	body, err := cs.AuthenticationV1().RESTClient().Post().Resource("selfsubjectreviews").
		Body([]byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)).DoRaw(ctx)
	if err != nil {
		return "", err
	}
	var r authenticationv1.SelfSubjectReview
	if err := json.Unmarshal(body, &r); err != nil {
		return "", err
	}
	return r.Status.UserInfo.Username, nil
}
