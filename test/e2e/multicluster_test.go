package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"

	"github.com/clustergateway/cluster-gateway/pkg/multicluster"
)

var configMapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// TestMulticlusterClient: one dynamic client on the hub's config, built by
// pkg/multicluster, reaches cluster-1 and cluster-2 by the request's context
// (and the hub without one), and two informers on that one client list and
// watch each cluster's own ConfigMaps. Every object is checked on the
// clusters directly.
func TestMulticlusterClient(t *testing.T) {
	requireGateway(t)
	hub := env.Hub.RESTConfig()
	dc, err := dynamic.NewForConfig(multicluster.ContextConfig(hub))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clusters := []string{env.Managed[0].GatewayName, env.Managed[1].GatewayName}
	in := func(i int) context.Context { return multicluster.WithCluster(ctx, clusters[i]) }

	// Writes through the routed client land on the named cluster only.
	ns, prefix := "default", uniqueName(t, "mc")
	name := func(kind string, i int) string { return fmt.Sprintf("%s-%s-%d", prefix, kind, i) }
	for i := range clusters {
		direct := managedClient(t, i)
		t.Cleanup(func() {
			for _, n := range []string{name("listed", i), name("watched", i)} {
				_ = direct.CoreV1().ConfigMaps(ns).Delete(context.Background(), n, metav1.DeleteOptions{})
			}
		})
		if _, err := dc.Resource(configMapsGVR).Namespace(ns).Create(in(i), configMap(ns, name("listed", i)), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create ConfigMap in %s: %v", clusters[i], err)
		}
		list, err := direct.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if names := cmNames(list.Items); !names[name("listed", i)] || names[name("listed", 1-i)] {
			t.Errorf("%s has, directly, %s: %v and %s: %v; want only the first", env.Managed[i].Name,
				name("listed", i), names[name("listed", i)], name("listed", 1-i), names[name("listed", 1-i)])
		}
	}
	// Without a cluster in the context: the hub itself, unchanged.
	if _, err := dc.Resource(configMapsGVR).Namespace(ns).Get(ctx, name("listed", 0), metav1.GetOptions{}); err == nil {
		t.Errorf("ConfigMap %s exists on the hub: a request without a cluster went elsewhere", name("listed", 0))
	}
	gws, err := dc.Resource(schema.GroupVersionResource{Group: "gateway.clustergateway.io", Version: "v1alpha1", Resource: "clustergateways"}).List(ctx, metav1.ListOptions{})
	if err != nil || len(gws.Items) == 0 {
		t.Errorf("listing ClusterGateways on the hub through the routed client: %v items, err %v", len(gws.Items), err)
	}

	// Two informers on the one client: list, then watch, each cluster.
	var stores [2]func(string) bool
	for i := range clusters {
		inf := dynamicinformer.NewFilteredDynamicInformer(dc, configMapsGVR, ns, 0, nil, nil).Informer()
		go inf.RunWithContext(in(i))
		stores[i] = func(name string) bool { _, ok, _ := inf.GetStore().GetByKey(ns + "/" + name); return ok }
		eventually(t, clusters[i]+" informer synced with its listed ConfigMap", func() error {
			if !inf.HasSynced() || !stores[i](name("listed", i)) {
				return fmt.Errorf("synced %v", inf.HasSynced())
			}
			return nil
		})
	}
	for i := range clusters {
		if stores[i](name("listed", 1-i)) {
			t.Errorf("the %s informer listed the other cluster's ConfigMap", clusters[i])
		}
	}
	for i := range clusters {
		if _, err := managedClient(t, i).CoreV1().ConfigMaps(ns).Create(context.Background(), typedConfigMap(ns, name("watched", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range clusters {
		eventually(t, clusters[i]+" informer sees "+name("watched", i), func() error {
			if !stores[i](name("watched", i)) {
				return fmt.Errorf("not yet")
			}
			return nil
		})
	}
	for i := range clusters {
		if stores[i](name("watched", 1-i)) {
			t.Errorf("the %s informer saw the other cluster's ConfigMap", clusters[i])
		}
	}
}

func configMap(ns, name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": ns},
	}}
}

func typedConfigMap(ns, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
}

func cmNames(items []corev1.ConfigMap) map[string]bool {
	out := map[string]bool{}
	for _, c := range items {
		out[c.Name] = true
	}
	return out
}

// TestMulticlusterExample runs examples/multicluster against the hub: it
// lists the demo pod of both clusters with one client.
func TestMulticlusterExample(t *testing.T) {
	requireGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", "./examples/multicluster", "--kubeconfig", env.Hub.Kubeconfig,
		env.Managed[0].GatewayName, env.Managed[1].GatewayName)
	cmd.Dir = "../.."
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go run ./examples/multicluster: %v\n%s", err, stderr.String())
	}
	for _, c := range env.Managed[:2] {
		if !regexp.MustCompile(`(?m)^` + c.GatewayName + `\s+default\s+demo\s+Running$`).MatchString(stdout.String()) {
			t.Errorf("the example printed\n%s\nwant a line: %s default demo Running", stdout.String(), c.GatewayName)
		}
	}
}
