package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/pager"

	"github.com/clustergateway/cluster-gateway/pkg/multicluster"
)

// newFleet creates a gateway for each of names, the i-th reading managed
// cluster i%2, and after them one named down at an address where nothing
// listens, all labelled fleet=<a new label>, which it returns.
func newFleet(t *testing.T, down string, names ...string) string {
	t.Helper()
	label := uniqueName(t, "fleet")
	for i, name := range append(append([]string{}, names...), down) {
		gw := directGateway(name, i%2)
		if name == down {
			gw.Spec.Endpoint.Address = "https://127.0.0.200:1" // nothing listens
		}
		gw.Labels = map[string]string{"fleet": label}
		createGateway(t, gw)
	}
	return label
}

// TestFanout: a set of clusters through one kubeconfig (kubectl cgw
// kubeconfig -l), read by unchanged kubectl through the hub as a user whose
// hub RBAC lets it use the proxy of two of the set's clusters and of a
// failing one, not of the third: get (ns, pods -A) shows a CLUSTER column
// with rows of the two, -o json marks each item's cluster, the failing cluster is a warning,
// the third is named nowhere, a write is refused with 405, and get -w sees a
// change made on each cluster.
func TestFanout(t *testing.T) {
	requireGateway(t)
	a, b, hidden, down := uniqueName(t, "fo-a"), uniqueName(t, "fo-b"), uniqueName(t, "fo-hidden"), uniqueName(t, "fo-down")
	label := newFleet(t, down, a, b, hidden)
	user := newHubUser(t, "fanout")
	role := uniqueName(t, "fanout")
	kubectlStdin(t, env.Hub.Kubeconfig, fmt.Sprintf(`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":%q},"rules":[
{"apiGroups":["gateway.clustergateway.io"],"resources":["clustersets/proxy"],"verbs":["get"]},
{"apiGroups":["gateway.clustergateway.io"],"resources":["clustergateways/proxy"],"resourceNames":[%q,%q,%q],"verbs":["get"]}]}`, role, a, b, down),
		"apply", "-f", "-")
	t.Cleanup(func() { _ = kubectl(t, env.Hub.Kubeconfig, nil, "", "delete", "clusterrole", role) })
	bind(t, "clusterrolebinding", role, "--clusterrole="+role, "--user="+user.Name)

	kc := filepath.Join(t.TempDir(), "set.kubeconfig")
	mustCgw(t, user.Kubeconfig, "kubeconfig", "-l", "fleet="+label, "-o", kc)

	t.Run("get shows a CLUSTER column with both clusters, the failing one as a warning", func(t *testing.T) {
		var res kubectlResult
		eventually(t, "rows of both clusters", func() error {
			res = kubectl(t, kc, nil, "", "get", "ns", "default")
			if res.Err != nil || !regexp.MustCompile(`(?m)^`+a+`\s+default\s`).MatchString(res.Stdout) || !regexp.MustCompile(`(?m)^`+b+`\s+default\s`).MatchString(res.Stdout) {
				return fmt.Errorf("%v\n%s\n%s", res.Err, res.Stdout, res.Stderr)
			}
			return nil
		})
		if h := strings.Fields(strings.SplitN(res.Stdout, "\n", 2)[0]); len(h) < 2 || h[0] != "CLUSTER" || h[1] != "NAME" {
			t.Errorf("header %v, want CLUSTER NAME ...", h)
		}
		if !strings.Contains(res.Stderr, "Warning") || !strings.Contains(res.Stderr, down) {
			t.Errorf("stderr %q: want a warning naming %s", res.Stderr, down)
		}
		if strings.Contains(res.Stdout+res.Stderr, hidden) {
			t.Errorf("the cluster the user may not use is named:\n%s\n%s", res.Stdout, res.Stderr)
		}
		// Every managed cluster runs the pod demo in default.
		res = kubectl(t, kc, nil, "", "get", "pods", "-A")
		if h := strings.Fields(strings.SplitN(res.Stdout, "\n", 2)[0]); res.Err != nil || len(h) < 3 || h[0] != "NAMESPACE" || h[1] != "CLUSTER" || h[2] != "NAME" ||
			!regexp.MustCompile(`(?m)^default\s+`+a+`\s+demo\s`).MatchString(res.Stdout) || !regexp.MustCompile(`(?m)^default\s+`+b+`\s+demo\s`).MatchString(res.Stdout) ||
			strings.Contains(res.Stdout+res.Stderr, hidden) {
			t.Errorf("get pods -A: %v\n%s\n%s\nwant NAMESPACE CLUSTER NAME ..., the pod demo of each of the two clusters", res.Err, res.Stdout, res.Stderr)
		}
	})

	t.Run("-o json marks each item's cluster", func(t *testing.T) {
		out := mustKubectl(t, kc, "get", "ns", "-o", "json")
		var l struct {
			Items []struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
			} `json:"items"`
		}
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		var clusters []string
		for _, it := range l.Items {
			if it.Metadata.Name == "default" {
				clusters = append(clusters, it.Metadata.Annotations["gateway.clustergateway.io/cluster"])
			}
		}
		slices.Sort(clusters)
		if want := []string{a, b}; !slices.Equal(clusters, want) {
			t.Errorf("namespace default marked with clusters %v, want %v", clusters, want)
		}
	})

	t.Run("a write is refused with 405", func(t *testing.T) {
		// As the hub admin, whom hub RBAC lets write anything: the
		// refusal is the gateway's.
		admin := filepath.Join(t.TempDir(), "admin-set.kubeconfig")
		mustCgw(t, env.Hub.Kubeconfig, "kubeconfig", "-l", "fleet="+label, "-o", admin)
		out := kubectlFails(t, admin, "create", "configmap", uniqueName(t, "fo-write"), "-n", "default", "-v=6")
		if !regexp.MustCompile(`verb="POST" url="\S+/clustersets/\S+" status="405 Method Not Allowed"`).MatchString(out) || !strings.Contains(out, "not allowed through a set of clusters, which is read-only") {
			t.Errorf("kubectl create through the set: %s; want 405 saying the set is read-only", out)
		}
	})

	t.Run("get -w sees a change on each cluster", func(t *testing.T) {
		cm := uniqueName(t, "fo-watch")
		create := func(i int, name string) {
			c := managedClient(t, i)
			if _, err := c.CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = c.CoreV1().ConfigMaps("default").Delete(context.Background(), name, metav1.DeleteOptions{})
			})
		}
		// One listed before the watch, so that kubectl has printed its list
		// (and watches from its resourceVersion) before the changes.
		create(0, cm+"-pre")
		w := startKubectl(t, kc, nil, "get", "configmaps", "-n", "default", "-w")
		w.waitLine(t, regexp.MustCompile(`^`+a+`\s+`+cm+`-pre\s`))
		for i := range 2 {
			create(i, cm)
		}
		// a reads managed cluster 0, b cluster 1: the same name on each.
		re := regexp.MustCompile(`^(` + a + `|` + b + `)\s+` + cm + `\s`)
		seen := map[string]bool{}
		for len(seen) < 2 {
			seen[w.waitLine(t, re)[1]] = true
		}
	})

	t.Run("get pods -l, get deploy -o wide and api-resources", func(t *testing.T) {
		// Objects on each cluster, made directly: no controller runs, and
		// none is needed to list them.
		app := uniqueName(t, "fo-app")
		for i := range 2 {
			c := managedClient(t, i)
			for _, pod := range []*corev1.Pod{
				{ObjectMeta: metav1.ObjectMeta{Name: app + "-x", Labels: map[string]string{"app": app}}},
				{ObjectMeta: metav1.ObjectMeta{Name: app + "-y", Labels: map[string]string{"app": app + "-other"}}},
			} {
				pod.Spec.Containers = []corev1.Container{{Name: "main", Image: "fake"}}
				if _, err := c.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					_ = c.CoreV1().Pods("default").Delete(context.Background(), pod.Name, *metav1.NewDeleteOptions(0))
				})
			}
			dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: app}, Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "fake"}}},
				},
			}}
			if _, err := c.AppsV1().Deployments("default").Create(context.Background(), dep, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = c.AppsV1().Deployments("default").Delete(context.Background(), app, metav1.DeleteOptions{})
			})
		}
		res := kubectl(t, kc, nil, "", "get", "pods", "-l", "app="+app, "-n", "default")
		if h := strings.Fields(strings.SplitN(res.Stdout, "\n", 2)[0]); res.Err != nil || len(h) < 2 || h[0] != "CLUSTER" || h[1] != "NAME" ||
			!regexp.MustCompile(`(?m)^`+a+`\s+`+app+`-x\s`).MatchString(res.Stdout) || !regexp.MustCompile(`(?m)^`+b+`\s+`+app+`-x\s`).MatchString(res.Stdout) ||
			strings.Contains(res.Stdout, app+"-y") || strings.Count(res.Stdout, app+"-x") != 2 || strings.Contains(res.Stdout+res.Stderr, hidden) {
			t.Errorf("get pods -l app=%s -n default: %v\n%s\n%s\nwant CLUSTER NAME ..., %s-x once on each of the two clusters, not %s-y", app, res.Err, res.Stdout, res.Stderr, app, app)
		}
		res = kubectl(t, kc, nil, "", "get", "deploy", "-n", "default", "-o", "wide")
		h := strings.Fields(strings.SplitN(res.Stdout, "\n", 2)[0])
		row := func(cluster string) *regexp.Regexp {
			return regexp.MustCompile(`(?m)^` + cluster + `\s+` + app + `\s.*\smain\s+fake\s+app=` + app + `\s*$`)
		}
		if res.Err != nil || len(h) < 2 || h[0] != "CLUSTER" || h[1] != "NAME" || !slices.Contains(h, "CONTAINERS") || !slices.Contains(h, "SELECTOR") ||
			!row(a).MatchString(res.Stdout) || !row(b).MatchString(res.Stdout) || strings.Contains(res.Stdout+res.Stderr, hidden) {
			t.Errorf("get deploy -o wide: %v\n%s\n%s\nwant CLUSTER NAME ... CONTAINERS IMAGES SELECTOR and deployment %s on each of the two clusters", res.Err, res.Stdout, res.Stderr, app)
		}
		res = kubectl(t, kc, nil, "", "api-resources")
		if res.Err != nil || !regexp.MustCompile(`(?m)^pods\s+po\s+v1\s+true\s+Pod\s*$`).MatchString(res.Stdout) ||
			!regexp.MustCompile(`(?m)^deployments\s+deploy\s+apps/v1\s+true\s+Deployment\s*$`).MatchString(res.Stdout) {
			t.Errorf("api-resources: %v\n%s\n%s\nwant the clusters' pods and deployments", res.Err, res.Stdout, res.Stderr)
		}
	})
}

// TestFanoutPaging: a list through a set of three clusters (two gateways
// reading one managed cluster, one the other; one more that fails), in
// pages of 2, by kubectl get --chunk-size=2 and by client-go's pager,
// returns every object of every cluster exactly once, each page at most 2.
func TestFanoutPaging(t *testing.T) {
	requireGateway(t)
	p1, p2, p3, down := uniqueName(t, "fp-a"), uniqueName(t, "fp-b"), uniqueName(t, "fp-c"), uniqueName(t, "fp-down")
	label := newFleet(t, down, p1, p2, p3)
	// Uneven: 5 on managed cluster 0 (read by p1 and p3), 3 on cluster 1 (p2).
	mark := uniqueName(t, "fp")
	var want []string
	for i, n := range []int{5, 3} {
		c := managedClient(t, i)
		for j := range n {
			name := fmt.Sprintf("%s-%d", mark, j)
			if _, err := c.CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"fp": mark}}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = c.CoreV1().ConfigMaps("default").Delete(context.Background(), name, metav1.DeleteOptions{})
			})
			for _, gw := range map[int][]string{0: {p1, p3}, 1: {p2}}[i] {
				want = append(want, gw+"/"+name)
			}
		}
	}
	slices.Sort(want)
	kc := filepath.Join(t.TempDir(), "set.kubeconfig")
	mustCgw(t, env.Hub.Kubeconfig, "kubeconfig", "-l", "fleet="+label, "-o", kc)

	t.Run("kubectl get --chunk-size=2", func(t *testing.T) {
		var res kubectlResult
		var got []string
		eventually(t, "every configmap", func() error {
			res = kubectl(t, kc, nil, "", "get", "configmaps", "-n", "default", "-l", "fp="+mark, "--chunk-size=2", "-v=6")
			got = nil
			for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n")[1:] {
				if f := strings.Fields(line); len(f) >= 2 {
					got = append(got, f[0]+"/"+f[1])
				}
			}
			slices.Sort(got)
			if res.Err != nil || len(got) < len(want) {
				return fmt.Errorf("%v: %d rows\n%s", res.Err, len(got), res.Stdout)
			}
			return nil
		})
		if !slices.Equal(got, want) {
			t.Errorf("rows %v, want each of %v exactly once\n%s", got, want, res.Stdout)
		}
		if n := len(regexp.MustCompile(`verb="GET" url="\S+/clustersets/\S+/proxy/api/v1/namespaces/default/configmaps\?continue=fc1\.[^"]*limit=2[^"]*" status="200 OK"`).FindAllString(res.Stderr, -1)); n < len(want)/2 {
			t.Errorf("%d pages followed a continue token, want at least %d (13 rows in pages of 2)\n%s", n, len(want)/2, res.Stderr)
		}
		if !strings.Contains(res.Stderr, "Warning") || !strings.Contains(res.Stderr, down) {
			t.Errorf("stderr: want a warning naming %s\n%s", down, res.Stderr)
		}
	})

	t.Run("client-go pager", func(t *testing.T) {
		cs, err := kubernetes.NewForConfig(multicluster.SetConfigFor(env.Hub.RESTConfig(), multicluster.LabelsSet("fleet="+label)))
		if err != nil {
			t.Fatal(err)
		}
		pages := 0
		p := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			l, err := cs.CoreV1().ConfigMaps("default").List(ctx, opts)
			if err == nil {
				pages++
				if len(l.Items) > 2 {
					t.Errorf("page %d has %d items, over the limit 2", pages, len(l.Items))
				}
			}
			return l, err
		})
		p.PageSize = 2
		obj, _, err := p.List(context.Background(), metav1.ListOptions{LabelSelector: "fp=" + mark})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		if err := apimeta.EachListItem(obj, func(o runtime.Object) error {
			m, err := apimeta.Accessor(o)
			if err == nil {
				got = append(got, m.GetAnnotations()["gateway.clustergateway.io/cluster"]+"/"+m.GetName())
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) || pages < len(want)/2 {
			t.Errorf("%d pages, items %v, want each of %v exactly once in pages of at most 2", pages, got, want)
		}
	})
}
