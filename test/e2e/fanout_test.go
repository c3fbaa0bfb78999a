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

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestFanout: a set of clusters through one kubeconfig (kubectl cgw
// kubeconfig -l), read by unchanged kubectl through the hub as a user whose
// hub RBAC lets it use the proxy of two of the set's clusters and of a
// failing one, not of the third: get (ns, pods -A) shows a CLUSTER column
// with rows of the two, -o json marks each item's cluster, the failing cluster is a warning,
// the third is named nowhere, a write is refused with 405, and get -w sees a
// change made on each cluster.
func TestFanout(t *testing.T) {
	requireGateway(t)
	label := uniqueName(t, "fleet")
	a, b, hidden, down := uniqueName(t, "fo-a"), uniqueName(t, "fo-b"), uniqueName(t, "fo-hidden"), uniqueName(t, "fo-down")
	for i, name := range []string{a, b, hidden, down} {
		gw := directGateway(name, i%2)
		if name == down {
			gw.Spec.Endpoint.Address = "https://127.0.0.200:1" // nothing listens
		}
		gw.Labels = map[string]string{"fleet": label}
		createGateway(t, gw)
	}
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
}
