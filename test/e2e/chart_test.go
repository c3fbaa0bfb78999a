package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
)

// chartServiceAccount is the ServiceAccount the chart creates in this test;
// nothing of config/ names it, so whatever it may do, the chart granted.
const chartServiceAccount = "e2e-chart-gateway"

// TestChartOnHub renders charts/cluster-gateway with helm and applies it to
// the hub: the workload (Deployment, PodDisruptionBudget, Service) with a
// server-side dry run (the gateway runs here as a local process, and the
// Service must stay the ExternalName that reaches it), the ServiceAccount,
// RBAC and APIService for real. The chart's objects replace config/'s of the
// same names, so config/'s bindings are gone for the duration; the gateway
// is then restarted as the chart's own ServiceAccount, which only the chart's
// RBAC names, and must serve and proxy. Everything is restored afterwards.
func TestChartOnHub(t *testing.T) {
	requireGateway(t)
	helm := filepath.Join(env.BinDir, "helm")
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("%s is missing: run `make tools`", helm)
	}
	ns := localenv.GatewayNamespace
	chartSA := "system:serviceaccount:" + ns + ":" + chartServiceAccount
	configSA := "system:serviceaccount:" + ns + ":cluster-gateway"
	saGroups := func(ns string) []string {
		return []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	}
	listSecrets := resourceAttributes{Verb: "list", Resource: "secrets", Namespace: ns}
	if canI(t, chartSA, saGroups(ns), listSecrets) {
		t.Fatalf("%s may list Secrets before the chart is applied", chartSA)
	}

	dir := t.TempDir()
	values := filepath.Join(dir, "values.yaml")
	writeFile(t, values, fmt.Sprintf("tls:\n  mode: existingSecret\n  caBundle: %s\nserviceAccount:\n  name: %s\n"+
		"# The hub dials an ExternalName Service's APIService port: the local gateway's.\nservice:\n  port: %d\n",
		base64.StdEncoding.EncodeToString(env.Gateway.CA.CertPEM), chartServiceAccount, env.Gateway.Port))
	out, err := exec.Command(helm, "template", "cluster-gateway", "../../charts/cluster-gateway", "--namespace", ns, "-f", values).CombinedOutput()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	workload, rest := splitManifests(t, string(out), map[string]bool{"Deployment": true, "PodDisruptionBudget": true, "Service": true})
	workloadFile, restFile := filepath.Join(dir, "workload.yaml"), filepath.Join(dir, "rest.yaml")
	writeFile(t, workloadFile, strings.Join(workload.docs, "\n---\n"))
	writeFile(t, restFile, strings.Join(rest.docs, "\n---\n"))
	if got, want := strings.Join(rest.kinds, ","), "APIService,ClusterRole,ClusterRole,ClusterRole,ClusterRoleBinding,Role,RoleBinding,RoleBinding,ServiceAccount"; got != want {
		t.Fatalf("the chart rendered %s besides the workload, want %s", got, want)
	}

	// The workload: accepted by the hub's admission and validation, stored nowhere.
	dry := mustKubectl(t, env.Hub.Kubeconfig, "apply", "--dry-run=server", "-f", workloadFile)
	for _, want := range []string{"deployment.apps/cluster-gateway created (server dry run)",
		"poddisruptionbudget.policy/cluster-gateway created (server dry run)", "service/cluster-gateway configured (server dry run)"} {
		if !strings.Contains(dry, want) {
			t.Errorf("dry run printed %q, want %q", dry, want)
		}
	}
	if r := kubectl(t, env.Hub.Kubeconfig, nil, "", "get", "deployment", "cluster-gateway", "-n", ns); !strings.Contains(r.Stderr, "NotFound") {
		t.Errorf("after a dry run the Deployment exists: %q %q", r.Stdout, r.Stderr)
	}
	if got := mustKubectl(t, env.Hub.Kubeconfig, "get", "service", "cluster-gateway", "-n", ns, "-o", "jsonpath={.spec.type}"); got != "ExternalName" {
		t.Errorf("after a dry run the Service is %q, want the local ExternalName", got)
	}

	apiService := mustKubectl(t, env.Hub.Kubeconfig, "get", "apiservice", localenv.APIServiceName, "-o", "json")
	origKubeconfig, err := os.ReadFile(env.Gateway.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { restoreConfigInstall(t, restFile, apiService, origKubeconfig) })

	// For real: the ServiceAccount, RBAC and the APIService.
	mustKubectl(t, env.Hub.Kubeconfig, "apply", "--server-side", "--force-conflicts", "--field-manager=e2e-helm", "-f", restFile)
	if canI(t, configSA, saGroups(ns), listSecrets) {
		t.Errorf("%s (config/'s) may still list Secrets: config/'s binding was not replaced", configSA)
	}
	for _, a := range []resourceAttributes{
		listSecrets,
		{Verb: "create", Resource: "secrets", Namespace: ns},
		{Verb: "get", Resource: "configmaps", Namespace: "kube-system", Name: "extension-apiserver-authentication"},
		{Verb: "create", Group: "authentication.k8s.io", Resource: "tokenreviews"},
		{Verb: "create", Group: "authorization.k8s.io", Resource: "subjectaccessreviews"},
	} {
		if !canI(t, chartSA, saGroups(ns), a) {
			t.Errorf("after the chart's RBAC, %s may not %+v", chartSA, a)
		}
	}
	requireOnlyChartBindings(t, ns)

	// The gateway, restarted as the chart's ServiceAccount.
	token := strings.TrimSpace(mustKubectl(t, env.Hub.Kubeconfig, "create", "token", chartServiceAccount, "-n", ns, "--duration=1h"))
	kc := clientcmdapi.NewConfig()
	kc.Clusters["hub"] = &clientcmdapi.Cluster{Server: env.Hub.URL, CertificateAuthorityData: env.Hub.CA.CertPEM}
	kc.AuthInfos["hub"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["hub"] = &clientcmdapi.Context{Cluster: "hub", AuthInfo: "hub"}
	kc.CurrentContext = "hub"
	if err := clientcmd.WriteToFile(*kc, env.Gateway.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	if user := strings.TrimSpace(mustKubectl(t, env.Gateway.Kubeconfig, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")); user != chartSA {
		t.Fatalf("the gateway's kubeconfig is %q, want %s", user, chartSA)
	}
	restartGateway(t, nil) // waits until the hub's APIService (the chart's) is Available and lists through it

	labels := mustKubectl(t, env.Hub.Kubeconfig, "get", "apiservice", localenv.APIServiceName, "-o", "jsonpath={.metadata.labels.helm\\.sh/chart}")
	if !strings.HasPrefix(labels, "cluster-gateway-") {
		t.Errorf("the APIService's helm.sh/chart label is %q: not the chart's", labels)
	}
	name := uniqueName(t, "chart")
	createGateway(t, directGateway(name, 0))
	if s := mustSecret(t, name); s.Labels[gatewayLabel] != "true" {
		t.Errorf("the gateway did not store %s as a labelled Secret", name)
	}
	_, via := viaHub(t, name)
	pods, err := via.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
	if err != nil || len(pods.Items) == 0 {
		t.Errorf("listing pods through the gateway running under the chart's RBAC: %v", err)
	}
}

type manifests struct {
	docs, kinds []string
}

// splitManifests separates helm's output into the kinds in workload and the rest.
func splitManifests(t *testing.T, out string, workload map[string]bool) (w, rest manifests) {
	t.Helper()
	for _, doc := range strings.Split(out, "\n---") {
		var o struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("helm output: %v\n%s", err, doc)
		}
		if o.Kind == "" {
			continue
		}
		m := &rest
		if workload[o.Kind] {
			m = &w
		}
		m.docs, m.kinds = append(m.docs, doc), append(m.kinds, o.Kind)
	}
	sort.Strings(rest.kinds)
	return w, rest
}

// requireOnlyChartBindings fails unless every binding naming the chart's
// ServiceAccount carries the chart's label.
func requireOnlyChartBindings(t *testing.T, ns string) {
	t.Helper()
	rbac := hubAdmin(t).RbacV1()
	ctx := context.Background()
	names := func(subjects []rbacv1.Subject) bool {
		for _, s := range subjects {
			if s.Kind == rbacv1.ServiceAccountKind && s.Name == chartServiceAccount && s.Namespace == ns {
				return true
			}
		}
		return false
	}
	found := 0
	rbs, err := rbac.RoleBindings("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range rbs.Items {
		if names(b.Subjects) {
			found++
			if !strings.HasPrefix(b.Labels["helm.sh/chart"], "cluster-gateway-") {
				t.Errorf("RoleBinding %s/%s names the chart's ServiceAccount but is not the chart's", b.Namespace, b.Name)
			}
		}
	}
	crbs, err := rbac.ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range crbs.Items {
		if names(b.Subjects) {
			found++
			if !strings.HasPrefix(b.Labels["helm.sh/chart"], "cluster-gateway-") {
				t.Errorf("ClusterRoleBinding %s names the chart's ServiceAccount but is not the chart's", b.Name)
			}
		}
	}
	if found != 3 {
		t.Errorf("%d bindings name the chart's ServiceAccount, want the chart's 3", found)
	}
}

// restoreConfigInstall puts back what localenv installed from config/: the
// gateway's own kubeconfig, config/'s ServiceAccount, RBAC and user roles
// (the chart's objects of the same names are deleted first, so nothing of
// the chart is left in them), and the local APIService; then restarts the gateway.
func restoreConfigInstall(t *testing.T, chartObjects, apiServiceJSON string, gatewayKubeconfig []byte) {
	t.Helper()
	if err := os.WriteFile(env.Gateway.Kubeconfig, gatewayKubeconfig, 0o600); err != nil {
		t.Errorf("restore the gateway's kubeconfig: %v", err)
	}
	if _, err := env.Kubectl(env.Hub.Kubeconfig, "delete", "--ignore-not-found", "--wait", "-f", chartObjects); err != nil {
		t.Errorf("delete the chart's objects: %v", err)
	}
	var args []string
	for _, f := range []string{"serviceaccount.yaml", "rbac.yaml", "user-roles.yaml"} {
		args = append(args, "-f", filepath.Join(env.ConfigDir, f))
	}
	if _, err := env.Kubectl(env.Hub.Kubeconfig, append([]string{"apply"}, args...)...); err != nil {
		t.Errorf("re-apply config/: %v", err)
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(apiServiceJSON), &obj); err != nil {
		t.Errorf("saved APIService: %v", err)
		return
	}
	meta := obj["metadata"].(map[string]any)
	for _, k := range []string{"resourceVersion", "uid", "creationTimestamp", "managedFields", "generation"} {
		delete(meta, k)
	}
	delete(obj, "status")
	b, _ := json.Marshal(obj)
	if _, err := env.KubectlCtx(context.Background(), env.Hub.Kubeconfig, b, "create", "-f", "-"); err != nil {
		t.Errorf("restore the APIService: %v", err)
	}
	if err := env.StopGateway(); err != nil {
		t.Errorf("stop the gateway: %v", err)
	}
	if err := env.StartGateway(context.Background(), nil); err != nil {
		t.Errorf("start the gateway as config/'s ServiceAccount again: %v", err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
