package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/inventory"
	"github.com/clustergateway/cluster-gateway/pkg/publish"
)

const publishHub = "https://hub.e2e.example:6443"

// installPublishRBAC applies the shipped publisher RBAC (config/publish)
// for --publish-namespace=ns, until the test ends.
func installPublishRBAC(t *testing.T, ns string) {
	t.Helper()
	rbac, err := os.ReadFile(filepath.Join(env.ConfigDir, "publish", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rbacFile := filepath.Join(t.TempDir(), "publish-rbac.yaml")
	writeFile(t, rbacFile, strings.ReplaceAll(string(rbac), "namespace: clusterprofiles", "namespace: "+ns))
	mustKubectl(t, env.Hub.Kubeconfig, "apply", "-f", rbacFile)
	t.Cleanup(func() { _, _ = env.Kubectl(env.Hub.Kubeconfig, "delete", "-f", rbacFile) })
}

// applyClusterProfileCRD applies the ClusterProfile CRD and waits until it
// is Established.
func applyClusterProfileCRD(t *testing.T) {
	t.Helper()
	crd := filepath.Join("testdata", "multicluster.x-k8s.io_clusterprofiles.yaml")
	mustKubectl(t, env.Hub.Kubeconfig, "apply", "--server-side", "-f", crd)
	mustKubectl(t, env.Hub.Kubeconfig, "wait", "--for=condition=Established", "--timeout=30s", "crd/clusterprofiles.multicluster.x-k8s.io")
}

// publishNamespace makes a namespace for a publish test (deleted when the
// test ends) with the shipped inventory-sync and publisher RBAC for it, and
// the ClusterProfile CRD established.
func publishNamespace(t *testing.T, prefix string) string {
	t.Helper()
	admin := hubAdmin(t)
	ns := uniqueName(t, prefix)
	if _, err := admin.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	installInventoryRBAC(t, ns)
	installPublishRBAC(t, ns)
	applyClusterProfileCRD(t)
	return ns
}

// hubCAFile is the hub's CA in a file, for --publish-hub-ca-file.
func hubCAFile(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "hub-ca.crt")
	writeFile(t, f, string(env.Hub.CA.CertPEM))
	return f
}

// TestClusterProfilePublish runs the gateway with the ClusterProfile sync and
// the publisher on, with the shipped RBAC only (config/inventory-sync,
// config/publish and the chart's source-namespace Role). It restarts the
// gateway (and stops it once, to delete a gateway unseen), so it does not
// run in parallel.
func TestClusterProfilePublish(t *testing.T) {
	requireGateway(t)
	ctx := context.Background()
	admin := hubAdmin(t)
	ns := publishNamespace(t, "pub")

	// The attacker may edit ClusterProfiles (and their status) in ns, and nothing else.
	attacker := "e2e-profile-editor-" + ns
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "profile-editor"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"multicluster.x-k8s.io"}, Resources: []string{"clusterprofiles", "clusterprofiles/status"}, Verbs: []string{"*"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "profile-editor"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "profile-editor"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: attacker}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	acfg := rest.CopyConfig(env.Hub.RESTConfig())
	acfg.Impersonate = rest.ImpersonationConfig{UserName: attacker}
	adc, err := dynamic.NewForConfig(acfg)
	if err != nil {
		t.Fatal(err)
	}
	aprofiles := adc.Resource(inventory.ClusterProfileResource).Namespace(ns)
	dc, err := dynamic.NewForConfig(env.Hub.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	profiles := dc.Resource(inventory.ClusterProfileResource).Namespace(ns)

	hubCA := hubCAFile(t)
	providersFile := filepath.Join(t.TempDir(), "providers.yaml")
	// The file also has a provider of the published name, as a file shared
	// with consumers would: the sync must still never use that entry.
	writeFile(t, providersFile, `apiVersion: gateway.clustergateway.io/v1alpha1
kind: CredentialProviderConfig
providers:
- name: `+e2eProvider+`
  exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/false}
- name: cluster-gateway
  exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/false}
`)
	label := "e2e-publish"
	args := append(haArgs(), "--credential-source-namespaces="+ns, "--inventory-sync=clusterprofile",
		"--credential-providers-file="+providersFile,
		"--inventory-sync-lease-duration=6s", "--inventory-sync-renew-deadline=4s", "--inventory-sync-retry-period=500ms",
		"--publish-clusterprofiles", "--publish-namespace="+ns, "--publish-gateway-selector="+label+"="+ns,
		"--publish-hub-server="+publishHub, "--publish-hub-ca-file="+hubCA)
	restartGateway(t, args)
	t.Cleanup(func() { restartGateway(t, nil) })
	gc := gatewayClient(t, env.Hub.Kubeconfig).GatewayV1alpha1().ClusterGateways()

	wantEntry := func(gw string) map[string]any {
		return map[string]any{"name": "cluster-gateway", "cluster": map[string]any{
			"server":                     publishHub + "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/" + gw + "/proxy",
			"certificate-authority-data": base64.StdEncoding.EncodeToString(env.Hub.CA.CertPEM)}}
	}
	published := func(name string, i int) *gatewayv1alpha1.ClusterGateway {
		gw := directGateway(name, i)
		gw.Labels = map[string]string{label: ns}
		return gw
	}

	gA := uniqueName(t, "pub-a")
	createGateway(t, published(gA, 0))
	t.Run("a published gateway gets a ClusterProfile of its own, healthy", func(t *testing.T) {
		eventually(t, "profile "+gA+" with the entry, ControlPlaneHealthy True and a version", func() error {
			p, err := profiles.Get(ctx, gA, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.GetLabels()[publish.LabelClusterManager] != publish.ClusterManagerName {
				return fmt.Errorf("labels %v", p.GetLabels())
			}
			if m, _, _ := unstructured.NestedString(p.Object, "spec", "clusterManager", "name"); m != publish.ClusterManagerName {
				return fmt.Errorf("clusterManager %q", m)
			}
			if e := entryOf(p, "cluster-gateway"); !jsonEqual(e, wantEntry(gA)) {
				return fmt.Errorf("entry %v, want %v", e, wantEntry(gA))
			}
			if v, _, _ := unstructured.NestedString(p.Object, "status", "version", "kubernetes"); v == "" {
				return fmt.Errorf("no status.version.kubernetes")
			}
			if c := conditionOf(p, publish.ConditionHealthy); c["status"] != "True" {
				return fmt.Errorf("condition %v", c)
			}
			return nil
		})
	})

	t.Run("the sync makes no gateway from a profile the publisher owns", func(t *testing.T) {
		p, err := aprofiles.Get(ctx, gA, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		aps, _, _ := unstructured.NestedSlice(p.Object, "status", "accessProviders")
		aps = append(aps, map[string]any{"name": e2eProvider, "cluster": map[string]any{"server": env.Managed[1].URL}})
		_ = unstructured.SetNestedSlice(p.Object, aps, "status", "accessProviders")
		if _, err := aprofiles.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// A profile that does ask for a gateway, written after: once its
		// gateway exists, the sync has had the owned profile's event too.
		syncedProfile(t, aprofiles, "probe-sync", e2eProvider, nil)
		cleanupGateway(t, inventory.GatewayName(ns, "probe-sync"))
		eventually(t, "the sync makes the gateway of probe-sync", func() error {
			_, err := gc.Get(ctx, inventory.GatewayName(ns, "probe-sync"), metav1.GetOptions{})
			return err
		})
		if _, err := gc.Get(ctx, inventory.GatewayName(ns, gA), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("gateway %s: %v, want none made from the publisher's own profile", inventory.GatewayName(ns, gA), err)
		}
		if err := profiles.Delete(ctx, "probe-sync", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("the sync makes no gateway from an entry of the published name", func(t *testing.T) {
		syncedProfile(t, aprofiles, "own-entry", "cluster-gateway", nil)
		syncedProfile(t, aprofiles, "probe-sync2", e2eProvider, nil)
		cleanupGateway(t, inventory.GatewayName(ns, "probe-sync2"))
		eventually(t, "the sync makes the gateway of probe-sync2", func() error {
			_, err := gc.Get(ctx, inventory.GatewayName(ns, "probe-sync2"), metav1.GetOptions{})
			return err
		})
		if _, err := gc.Get(ctx, inventory.GatewayName(ns, "own-entry"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("gateway from an entry named cluster-gateway: %v, want none", err)
		}
		_ = profiles.Delete(ctx, "probe-sync2", metav1.DeleteOptions{})
		_ = profiles.Delete(ctx, "own-entry", metav1.DeleteOptions{})
	})

	t.Run("a synced gateway's entry joins its profile; other providers' entries before and after stay", func(t *testing.T) {
		before := map[string]any{"name": "other-before", "cluster": map[string]any{"server": "https://127.0.0.250:1", "extensions": []any{map[string]any{"name": "x", "extension": map[string]any{"b": 1, "a": []any{"z", "y"}}}}}}
		syncedProfile(t, profiles, "p1", e2eProvider, before)
		name := inventory.GatewayName(ns, "p1")
		cleanupGateway(t, name)
		var gw *gatewayv1alpha1.ClusterGateway
		eventually(t, "the sync makes "+name, func() error {
			gw, err = gc.Get(ctx, name, metav1.GetOptions{})
			return err
		})
		gw.Labels[label] = ns // published from now on
		if _, err := gc.Update(ctx, gw, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "p1 holds the gateway's entry", func() error {
			p, err := profiles.Get(ctx, "p1", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if e := entryOf(p, "cluster-gateway"); !jsonEqual(e, wantEntry(name)) {
				return fmt.Errorf("entry %v", e)
			}
			if e := entryOf(p, "other-before"); !jsonEqual(e, before) {
				t.Fatalf("other-before became %v, was %v", e, before)
			}
			return nil
		})
		// Another provider adds its entry after, and removes the gateway's:
		// the gateway puts its own back and leaves the others as they are.
		after := map[string]any{"name": "other-after", "cluster": map[string]any{"server": "https://127.0.0.251:1"}}
		p, err := profiles.Get(ctx, "p1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		aps, _, _ := unstructured.NestedSlice(p.Object, "status", "accessProviders")
		var kept []any
		for _, e := range aps {
			if e.(map[string]any)["name"] != "cluster-gateway" {
				kept = append(kept, e)
			}
		}
		_ = unstructured.SetNestedSlice(p.Object, append(kept, after), "status", "accessProviders")
		if _, err := profiles.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the entry is back, the others unchanged", func() error {
			p, err := profiles.Get(ctx, "p1", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if e := entryOf(p, "cluster-gateway"); !jsonEqual(e, wantEntry(name)) {
				return fmt.Errorf("entry %v", e)
			}
			if !jsonEqual(entryOf(p, "other-before"), before) || !jsonEqual(entryOf(p, "other-after"), after) {
				t.Fatalf("other entries changed: %v", p.Object["status"])
			}
			return nil
		})

		// The profile no longer asks for a gateway: the sync deletes it, and
		// the publisher takes its entry back out; the others stay.
		p, err = profiles.Get(ctx, "p1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		aps, _, _ = unstructured.NestedSlice(p.Object, "status", "accessProviders")
		kept = nil
		for _, e := range aps {
			if e.(map[string]any)["name"] != e2eProvider {
				kept = append(kept, e)
			}
		}
		_ = unstructured.SetNestedSlice(p.Object, kept, "status", "accessProviders")
		if _, err := profiles.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the gateway and its entry are gone", func() error {
			if _, err := gc.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("gateway %s: %v", name, err)
			}
			p, err := profiles.Get(ctx, "p1", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if e := entryOf(p, "cluster-gateway"); e != nil {
				return fmt.Errorf("entry still there: %v", e)
			}
			if !jsonEqual(entryOf(p, "other-before"), before) || !jsonEqual(entryOf(p, "other-after"), after) {
				t.Fatalf("other entries changed: %v", p.Object["status"])
			}
			return nil
		})
	})

	t.Run("a profile editor cannot make the gateway write into or delete a profile it did not create", func(t *testing.T) {
		gB := uniqueName(t, "pub-b")
		// A squatted profile with every mark of the publisher's forged.
		squat := publishForged(gB)
		created, err := aprofiles.Create(ctx, squat, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Object["status"] = map[string]any{"accessProviders": []any{map[string]any{"name": "cluster-gateway", "cluster": map[string]any{"server": "https://127.0.0.252:1"}}}}
		created, err = aprofiles.UpdateStatus(ctx, created, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		createGateway(t, published(gB, 1))
		// A gateway created after it is published, which proves the
		// publisher has processed gateways since.
		gC := uniqueName(t, "pub-c")
		createGateway(t, published(gC, 1))
		eventually(t, "profile "+gC+" published", func() error {
			p, err := profiles.Get(ctx, gC, metav1.GetOptions{})
			if err == nil && entryOf(p, "cluster-gateway") == nil {
				return fmt.Errorf("no entry yet")
			}
			return err
		})
		time.Sleep(3 * time.Second)
		now, err := profiles.Get(ctx, gB, metav1.GetOptions{})
		if err != nil || now.GetResourceVersion() != created.GetResourceVersion() {
			t.Errorf("squatted profile %s: %v, resourceVersion %s, was %s: want it untouched", gB, err, now.GetResourceVersion(), created.GetResourceVersion())
		}
		if err := gc.Delete(ctx, gB, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := gc.Delete(ctx, gC, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the deleted gateway "+gC+" takes its profile with it", func() error {
			if _, err := profiles.Get(ctx, gC, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("profile %s: %v", gC, err)
			}
			return nil
		})
		if _, err := profiles.Get(ctx, gB, metav1.GetOptions{}); err != nil {
			t.Errorf("squatted profile %s after its gateway was deleted: %v, want it kept", gB, err)
		}
	})

	// An unchanged fleet causing no write: TestClusterProfilePublishTwoReplicas
	// (60 s, both replicas running, from the hub's audit log and resourceVersions).

	t.Run("a gateway made unreachable turns ControlPlaneHealthy False within the probe period", func(t *testing.T) {
		gw, err := gc.Get(ctx, gA, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		gw.Spec = directGateway(gA, 0).Spec
		gw.Spec.Endpoint.Address = "https://127.0.0.2:1" // managed-1's address, a closed port
		if _, err := gc.Update(ctx, gw, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		eventually(t, "ControlPlaneHealthy False on "+gA, func() error {
			p, err := profiles.Get(ctx, gA, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if c := conditionOf(p, publish.ConditionHealthy); c["status"] != "False" || c["reason"] != gatewayv1alpha1.ReasonDialFailed {
				return fmt.Errorf("condition %v", c)
			}
			return nil
		})
		// Probe interval 1 s, 2 failures, a 2 s timeout: within 2x that
		// and the write.
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("False after %v, want within 10 s", d)
		}
		if err := gc.Delete(ctx, gA, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the deleted gateway "+gA+" takes its profile with it", func() error {
			if _, err := profiles.Get(ctx, gA, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("profile %s: %v", gA, err)
			}
			return nil
		})
	})

	t.Run("a gateway deleted while no replica runs loses its profile at the next start; a gateway named like the old record Secret is published", func(t *testing.T) {
		// The name of the single record Secret of earlier builds: a
		// gateway of that name stopped the publisher there.
		reserved := "cluster-gateway-published-profiles"
		createGateway(t, published(reserved, 1))
		gD := uniqueName(t, "pub-d")
		createGateway(t, published(gD, 1))
		for _, n := range []string{reserved, gD} {
			eventually(t, "profile "+n+" published", func() error {
				p, err := profiles.Get(ctx, n, metav1.GetOptions{})
				if err == nil && !jsonEqual(entryOf(p, "cluster-gateway"), wantEntry(n)) {
					return fmt.Errorf("entry %v", entryOf(p, "cluster-gateway"))
				}
				return err
			})
		}
		if err := env.StopGateway(); err != nil {
			t.Fatal(err)
		}
		// An admin deletes the gateway's Secret while no replica runs: no
		// replica sees the deletion.
		if err := admin.CoreV1().Secrets(secretNamespace).Delete(ctx, gD, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		restartGateway(t, args)
		eventually(t, "the profile of "+gD+", deleted while no replica ran, withdrawn", func() error {
			if _, err := profiles.Get(ctx, gD, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("profile %s: %v", gD, err)
			}
			return nil
		})
		if p, err := profiles.Get(ctx, reserved, metav1.GetOptions{}); err != nil || !jsonEqual(entryOf(p, "cluster-gateway"), wantEntry(reserved)) {
			t.Errorf("profile %s after the restart: %v, want it kept with its entry", reserved, err)
		}
	})
}

// syncedProfile creates a profile whose status names provider for
// managed-1 (after the entry other, when not nil), as a ClusterProfile writer.
func syncedProfile(t *testing.T, c dynamic.ResourceInterface, name, provider string, other map[string]any) {
	t.Helper()
	ctx := context.Background()
	p := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"clusterManager": map[string]any{"name": "e2e"}},
	}}
	created, err := c.Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := env.Managed[0]
	var aps []any
	if other != nil {
		aps = append(aps, other)
	}
	aps = append(aps, map[string]any{"name": provider, "cluster": map[string]any{"server": m.URL, "certificate-authority-data": base64.StdEncoding.EncodeToString(m.CA.CertPEM)}})
	created.Object["status"] = map[string]any{"accessProviders": aps}
	if _, err := c.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// publishForged is a profile with every mark a published one has.
func publishForged(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
		"metadata": map[string]any{"name": name, "labels": map[string]any{publish.LabelClusterManager: publish.ClusterManagerName}},
		"spec":     map[string]any{"displayName": name, "clusterManager": map[string]any{"name": publish.ClusterManagerName}},
	}}
}

func entryOf(p *unstructured.Unstructured, name string) map[string]any {
	aps, _, _ := unstructured.NestedSlice(p.Object, "status", "accessProviders")
	for _, e := range aps {
		if m, ok := e.(map[string]any); ok && m["name"] == name {
			return m
		}
	}
	return nil
}

func conditionOf(p *unstructured.Unstructured, typ string) map[string]any {
	cs, _, _ := unstructured.NestedSlice(p.Object, "status", "conditions")
	for _, c := range cs {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			return m
		}
	}
	return nil
}

func jsonEqual(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	var x, y any
	_ = json.Unmarshal(ja, &x)
	_ = json.Unmarshal(jb, &y)
	return fmt.Sprint(x) == fmt.Sprint(y)
}
