package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"sigs.k8s.io/yaml"

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/inventory"
)

// recipe is the snippet of docs/install.md marked <!-- recipe: name -->,
// exactly as the docs show it.
func recipe(t *testing.T, name string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)<!-- recipe: " + regexp.QuoteMeta(name) + " -->\n```[a-z]*\n(.*?)```\n")
	m := re.FindSubmatch(raw)
	if m == nil {
		t.Fatalf("docs/install.md has no recipe %q (a fenced block after <!-- recipe: %s -->)", name, name)
	}
	return string(m[1])
}

// consumerEnv is what the recipes' placeholders stand for here.
type consumerEnv struct {
	ns, sa, gateway, tokenFile, plugin string
}

// fill replaces the recipes' placeholders, and nothing else.
func (c *consumerEnv) fill(s string) string {
	return strings.NewReplacer(
		"hub.example.com:6443", hostOf(env.Hub.URL),
		"HUB_CA_BASE64", base64.StdEncoding.EncodeToString(env.Hub.CA.CertPEM),
		"prod-eu", c.gateway,
		"my-team", c.ns,
		"my-consumer", c.sa,
		"/usr/local/bin/kubectl-cgw", c.plugin,
		"/var/run/secrets/hub/token", c.tokenFile,
	).Replace(s)
}

// profileProviders is the SIG-Multicluster provider file as
// sigs.k8s.io/cluster-inventory-api/pkg/access reads it.
type profileProviders struct {
	Providers []struct {
		Name       string                   `json:"name"`
		ExecConfig *clientcmdapi.ExecConfig `json:"execConfig"`
	} `json:"providers"`
}

// consumerConfig is what a SIG-Multicluster consumer builds, with client-go
// only: read the ClusterProfile, take the first status.accessProviders
// entry its provider file names, and make a rest.Config of its cluster and
// that provider's exec plugin.
func consumerConfig(t *testing.T, dyn dynamic.Interface, ns, profile, providerFile string) (*rest.Config, error) {
	t.Helper()
	var pf profileProviders
	if err := json.Unmarshal([]byte(providerFile), &pf); err != nil {
		return nil, fmt.Errorf("provider file: %v", err)
	}
	cp, err := dyn.Resource(inventory.ClusterProfileResource).Namespace(ns).Get(context.Background(), profile, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	raw, _, _ := unstructured.NestedSlice(cp.Object, "status", "accessProviders")
	b, _ := json.Marshal(raw)
	var entries []struct {
		Name    string              `json:"name"`
		Cluster clientcmdv1.Cluster `json:"cluster"`
	}
	if err := json.Unmarshal(b, &entries); err != nil {
		return nil, err
	}
	for _, p := range pf.Providers {
		for _, e := range entries {
			if e.Name != p.Name {
				continue
			}
			exec := *p.ExecConfig
			exec.InteractiveMode = clientcmdapi.NeverExecInteractiveMode
			return &rest.Config{Host: e.Cluster.Server, TLSClientConfig: rest.TLSClientConfig{CAData: e.Cluster.CertificateAuthorityData}, ExecProvider: &exec}, nil
		}
	}
	return nil, fmt.Errorf("ClusterProfile %s/%s names none of the provider file's providers", ns, profile)
}

// argoCluster is the part of Argo CD's cluster Secret config
// (ClusterConfig) that the recipe uses, with Argo CD's JSON names.
type argoCluster struct {
	ExecProviderConfig *struct {
		Command     string            `json:"command"`
		Args        []string          `json:"args"`
		Env         map[string]string `json:"env"`
		APIVersion  string            `json:"apiVersion"`
		InstallHint string            `json:"installHint"`
	} `json:"execProviderConfig"`
	TLSClientConfig struct {
		Insecure   bool   `json:"insecure"`
		ServerName string `json:"serverName"`
		CertData   []byte `json:"certData"`
		KeyData    []byte `json:"keyData"`
		CAData     []byte `json:"caData"`
	} `json:"tlsClientConfig"`
}

// argoRESTConfig builds the rest.Config from a cluster Secret as Argo CD
// does (Cluster.RawRestConfig, the execProviderConfig case).
func argoRESTConfig(t *testing.T, secretYAML string) *rest.Config {
	t.Helper()
	var s corev1.Secret
	if err := yaml.UnmarshalStrict([]byte(secretYAML), &s); err != nil {
		t.Fatalf("the Argo CD recipe is not a Secret: %v", err)
	}
	if s.Labels["argocd.argoproj.io/secret-type"] != "cluster" {
		t.Fatalf("the Argo CD recipe lacks the cluster secret-type label: %v", s.Labels)
	}
	var c argoCluster
	if err := json.Unmarshal([]byte(s.StringData["config"]), &c); err != nil || c.ExecProviderConfig == nil {
		t.Fatalf("the Argo CD recipe's config: %v (execProviderConfig %v)", err, c.ExecProviderConfig)
	}
	var env []clientcmdapi.ExecEnvVar
	for k, v := range c.ExecProviderConfig.Env {
		env = append(env, clientcmdapi.ExecEnvVar{Name: k, Value: v})
	}
	tls := c.TLSClientConfig
	return &rest.Config{
		Host:            s.StringData["server"],
		TLSClientConfig: rest.TLSClientConfig{Insecure: tls.Insecure, ServerName: tls.ServerName, CertData: tls.CertData, KeyData: tls.KeyData, CAData: tls.CAData},
		ExecProvider: &clientcmdapi.ExecConfig{
			APIVersion: c.ExecProviderConfig.APIVersion, Command: c.ExecProviderConfig.Command, Args: c.ExecProviderConfig.Args,
			Env: env, InstallHint: c.ExecProviderConfig.InstallHint, InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
		},
	}
}

// fluxRESTConfig builds the rest.Config from the Flux recipe as
// kustomize-controller does: the Kustomization's spec.kubeConfig.secretRef
// names the Secret and key, whose kubeconfig clientcmd loads.
func fluxRESTConfig(t *testing.T, docs string) *rest.Config {
	t.Helper()
	parts := strings.Split(docs, "\n---\n")
	if len(parts) != 2 {
		t.Fatalf("the Flux recipe has %d documents, want a Secret and a Kustomization", len(parts))
	}
	var s corev1.Secret
	if err := yaml.UnmarshalStrict([]byte(parts[0]), &s); err != nil {
		t.Fatalf("the Flux recipe's Secret: %v", err)
	}
	var ks struct {
		Kind string `json:"kind"`
		Spec struct {
			KubeConfig struct {
				SecretRef struct{ Name, Key string } `json:"secretRef"`
			} `json:"kubeConfig"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal([]byte(parts[1]), &ks); err != nil || ks.Kind != "Kustomization" {
		t.Fatalf("the Flux recipe's Kustomization: %v (kind %q)", err, ks.Kind)
	}
	ref := ks.Spec.KubeConfig.SecretRef
	if ref.Name != s.Name || s.StringData[ref.Key] == "" {
		t.Fatalf("the Kustomization's kubeConfig.secretRef %+v does not name the recipe's Secret %s and a key of it", ref, s.Name)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(s.StringData[ref.Key]))
	if err != nil {
		t.Fatalf("the Flux recipe's kubeconfig: %v", err)
	}
	return cfg
}

func listsNamespace(cfg *rest.Config, ns string) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	l, err := cs.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(l.Items, func(n corev1.Namespace) bool { return n.Name == ns }) {
		return fmt.Errorf("namespace %s of managed-1 not listed", ns)
	}
	return nil
}

// consumerPublishLabel selects the gateways TestConsumer publishes.
const consumerPublishLabel = "e2e-consumer"

// TestConsumer: fleet tools reach managed-1 through the hub with their own
// hub ServiceAccount's token, given by `kubectl cgw credential`, each built
// from a recipe of docs/install.md exactly as shown (placeholders filled):
// a SIG-Multicluster ClusterProfile consumer written with client-go only
// (reading the entry the gateway's publisher wrote, which restarts the
// gateway, so the test does not run in parallel), Argo CD's cluster Secret, Flux's kubeconfig Secret. A second hub
// ServiceAccount without RBAC on clustergateways/proxy gets 403; in Caller
// mode managed-1 sees the consumer's ServiceAccount; kubectl --as through the
// proxy behaves as on a direct connection; a deleted ServiceAccount loses
// access within the documented bound.
func TestConsumer(t *testing.T) {
	requireGateway(t)
	ctx := context.Background()
	admin := hubAdmin(t)
	c := &consumerEnv{ns: uniqueName(t, "consumer"), sa: "fleet-tool", gateway: uniqueName(t, "consumer-gw"), plugin: cliBinary(t)}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Namespaces().Delete(context.Background(), c.ns, metav1.DeleteOptions{}) })
	dir := t.TempDir()
	hubToken := func(sa string) string {
		t.Helper()
		if _, err := admin.CoreV1().ServiceAccounts(c.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		ttl := int64(3600)
		tr, err := admin.CoreV1().ServiceAccounts(c.ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, sa+".token")
		if err := os.WriteFile(p, []byte(tr.Status.Token), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c.tokenFile = hubToken(c.sa)
	noRBACToken := hubToken("no-proxy-rbac")

	// The RBAC recipe, as shown, on the hub.
	rbacFile := filepath.Join(dir, "rbac.yaml")
	if err := os.WriteFile(rbacFile, []byte(strings.ReplaceAll(c.fill(recipe(t, "consumer-rbac")), "name: fleet-consumer", "name: "+c.ns)), 0o600); err != nil {
		t.Fatal(err)
	}
	mustKubectl(t, env.Hub.Kubeconfig, "apply", "-f", rbacFile)
	t.Cleanup(func() { _, _ = env.Kubectl(env.Hub.Kubeconfig, "delete", "-f", rbacFile, "--wait=false") })

	// Managed-1 in Caller mode; it lets the consumer's ServiceAccount (as
	// the hub names it) list namespaces.
	gw := directGateway(c.gateway, 0)
	gw.Labels = map[string]string{consumerPublishLabel: c.ns} // published (below)
	gw.Spec.Impersonation.Mode = gatewayv1alpha1.ImpersonationCaller
	createGateway(t, gw)
	consumerUser := "system:serviceaccount:" + c.ns + ":" + c.sa
	m1 := managedClient(t, 0)
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: c.ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list"}}}}
	if _, err := m1.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m1.RbacV1().ClusterRoles().Delete(context.Background(), c.ns, metav1.DeleteOptions{}) })
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: c.ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: c.ns},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: consumerUser}},
	}
	if _, err := m1.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = m1.RbacV1().ClusterRoleBindings().Delete(context.Background(), c.ns, metav1.DeleteOptions{})
	})
	marker := uniqueName(t, "consumer-marker")
	mustKubectl(t, env.Managed[0].Kubeconfig, "create", "namespace", marker)
	t.Cleanup(func() { _, _ = env.Kubectl(env.Managed[0].Kubeconfig, "delete", "namespace", marker, "--wait=false") })

	// The ClusterProfile, as the publisher writes it: the gateway restarts
	// with the publisher on (the shipped RBAC), which creates a profile of
	// the gateway's name in c.ns with its entry (name cluster-gateway, the
	// hub's proxy path, the hub's CA). Another provider's entry is then put
	// first: the consumer must choose by name.
	applyClusterProfileCRD(t)
	t.Cleanup(func() {
		_, _ = env.Kubectl(env.Hub.Kubeconfig, "delete", "-f", filepath.Join("testdata", "multicluster.x-k8s.io_clusterprofiles.yaml"), "--wait=false")
	})
	installPublishRBAC(t, c.ns)
	restartGateway(t, append(slices.Clone(gatewayArgs), "--publish-clusterprofiles", "--publish-namespace="+c.ns,
		"--publish-gateway-selector="+consumerPublishLabel+"="+c.ns, "--publish-hub-server="+env.Hub.URL, "--publish-hub-ca-file="+hubCAFile(t)))
	t.Cleanup(func() { restartGateway(t, nil) })
	dyn, err := dynamic.NewForConfig(hubConfigFrom(t, env.Hub.Kubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	profiles := dyn.Resource(inventory.ClusterProfileResource).Namespace(c.ns)
	wantServer := env.Hub.URL + "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/" + c.gateway + "/proxy"
	eventually(t, "the publisher's entry in ClusterProfile "+c.gateway+", behind another provider's", func() error {
		cp, err := profiles.Get(ctx, c.gateway, metav1.GetOptions{})
		if err != nil {
			return err
		}
		entries, _, _ := unstructured.NestedSlice(cp.Object, "status", "accessProviders")
		var ours map[string]any
		for _, e := range entries {
			if m, _ := e.(map[string]any); m["name"] == "cluster-gateway" {
				ours = m
			}
		}
		if ours == nil {
			return fmt.Errorf("no cluster-gateway entry yet: %v", entries)
		}
		server, _, _ := unstructured.NestedString(ours, "cluster", "server")
		ca, _, _ := unstructured.NestedString(ours, "cluster", "certificate-authority-data")
		if server != wantServer || ca != base64.StdEncoding.EncodeToString(env.Hub.CA.CertPEM) {
			t.Fatalf("the publisher's entry is %v, want server %s and the hub's CA", ours, wantServer)
		}
		if first, _ := entries[0].(map[string]any); first["name"] == "other-provider" {
			return nil
		}
		entries = append([]any{map[string]any{"name": "other-provider", "cluster": map[string]any{"server": "https://192.0.2.1:6443"}}}, entries...)
		if err := unstructured.SetNestedSlice(cp.Object, entries, "status", "accessProviders"); err != nil {
			return err
		}
		if _, err := profiles.UpdateStatus(ctx, cp, metav1.UpdateOptions{}); err != nil {
			return err
		}
		return errors.New("other-provider's entry just added: read again")
	})

	providerFile := c.fill(recipe(t, "provider-file"))
	consumer, err := consumerConfig(t, dyn, c.ns, c.gateway, providerFile)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("ClusterProfile consumer lists managed-1's namespaces", func(t *testing.T) {
		eventually(t, "the consumer listing namespaces of managed-1", func() error { return listsNamespace(rest.CopyConfig(consumer), marker) })
	})
	t.Run("a ServiceAccount without proxy RBAC gets 403", func(t *testing.T) {
		other, err := consumerConfig(t, dyn, c.ns, c.gateway, strings.ReplaceAll(providerFile, c.tokenFile, noRBACToken))
		if err != nil {
			t.Fatal(err)
		}
		err = listsNamespace(other, marker)
		if !apierrors.IsForbidden(err) {
			t.Fatalf("listing namespaces as a ServiceAccount without RBAC on clustergateways/proxy: %v, want 403", err)
		}
	})
	t.Run("Caller mode: managed-1 sees the consumer", func(t *testing.T) {
		cs, err := kubernetes.NewForConfig(rest.CopyConfig(consumer))
		if err != nil {
			t.Fatal(err)
		}
		ssr, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if u := ssr.Status.UserInfo; u.Username != consumerUser || !slices.Contains(u.Groups, "system:serviceaccounts:"+c.ns) {
			t.Errorf("managed-1 saw %+v, want %s in system:serviceaccounts:%s", u, consumerUser, c.ns)
		}
	})
	t.Run("Argo CD cluster Secret", func(t *testing.T) {
		cfg := argoRESTConfig(t, c.fill(recipe(t, "argocd-cluster-secret")))
		eventually(t, "Argo CD's rest.Config listing namespaces of managed-1", func() error { return listsNamespace(cfg, marker) })
	})
	t.Run("Flux kubeconfig", func(t *testing.T) {
		cfg := fluxRESTConfig(t, c.fill(recipe(t, "flux-kubeconfig")))
		if cfg.ExecProvider == nil || cfg.ExecProvider.Command != c.plugin {
			t.Fatalf("the Flux kubeconfig does not run the plugin: %+v", cfg.ExecProvider)
		}
		eventually(t, "Flux's rest.Config listing namespaces of managed-1", func() error { return listsNamespace(cfg, marker) })
	})
	t.Run("kubectl --as through the proxy as on a direct connection", func(t *testing.T) {
		whoami := func(kc string, args ...string) kubectlResult {
			return kubectl(t, kc, nil, "", append([]string{"auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}"}, args...)...)
		}
		asConsumer := []string{"--as=" + consumerUser, "--as-group=e2e-fleet"}
		direct := whoami(env.Managed[0].Kubeconfig, asConsumer...)
		through := whoami(viaHubKubeconfig(t, c.gateway), asConsumer...)
		if direct.Err != nil || through.Err != nil || direct.Stdout != through.Stdout || !strings.HasPrefix(through.Stdout, consumerUser+" ") || !strings.Contains(through.Stdout, "e2e-fleet") {
			t.Errorf("kubectl --as auth whoami: direct %q (%v %s), through the hub %q (%v %s); want the same, the impersonated user and group", direct.Stdout, direct.Err, direct.Stderr, through.Stdout, through.Err, through.Stderr)
		}
		// A user the hub grants nothing on clustergateways/proxy: the
		// hub's authorization of the impersonated user refuses it.
		// (client-go: kubectl shows this 403 only as "unknown".)
		for user, want := range map[string]bool{"e2e-nobody": false, consumerUser: true} {
			cfg, _ := viaHub(t, c.gateway)
			cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
			err := listsNamespace(cfg, marker)
			if want && err != nil || !want && !apierrors.IsForbidden(err) {
				t.Errorf("hub admin as %s through the hub: %v, want allowed %v (403 otherwise)", user, err, want)
			}
		}
	})
	// Last: it deletes the consumer's ServiceAccount.
	t.Run("a deleted ServiceAccount loses access within the documented bound", func(t *testing.T) {
		if err := listsNamespace(rest.CopyConfig(consumer), marker); err != nil {
			t.Fatal(err)
		}
		if err := admin.CoreV1().ServiceAccounts(c.ns).Delete(ctx, c.sa, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		deleted := time.Now()
		// docs/install.md: about 10 s (the hub's token cache); the rest is slack
		// for the hub seeing the deletion on a loaded machine.
		const bound = 10*time.Second + 15*time.Second
		for {
			err := listsNamespace(rest.CopyConfig(consumer), marker)
			if apierrors.IsUnauthorized(err) {
				t.Logf("refused %v after the ServiceAccount was deleted", time.Since(deleted).Round(time.Millisecond))
				return
			}
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Logf("while waiting: %v", err)
			}
			if time.Since(deleted) > bound {
				t.Fatalf("the consumer still has access %v after its ServiceAccount was deleted (last: %v)", bound, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	})
}
