package inventory

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/component-base/metrics"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
)

const (
	gwNamespace  = "gw"
	srcNamespace = "fleet"
)

// harness is a Store and a Controller on fake hub clients.
type harness struct {
	client  *fake.Clientset
	dynamic *dynamicfake.FakeDynamicClient
	store   *gateways.Store
	reg     metrics.KubeRegistry
}

func newHarness(t *testing.T, objs ...runtime.Object) *harness {
	t.Helper()
	scheme := runtime.NewScheme()
	return &harness{
		client: fake.NewClientset(objs...),
		dynamic: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme,
			map[schema.GroupVersionResource]string{ClusterProfileResource: "ClusterProfileList"}),
	}
}

// start runs the store and a controller syncing sources until the test
// ends or stop is called.
func (h *harness) start(t *testing.T, identity string, sources ...Source) (c *Controller, stop func()) {
	t.Helper()
	if h.store == nil {
		h.store = gateways.NewStore(h.client, gwNamespace, gwNamespace, srcNamespace)
		sctx, scancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { h.store.Run(sctx) })
		t.Cleanup(func() { scancel(); wg.Wait() })
	}
	o := Config{Providers: []string{"eks"}, LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond}
	for _, s := range sources {
		o.Sources = append(o.Sources, string(s))
	}
	c, err := New(Params{Config: o, Store: h.store, Client: h.client, Dynamic: h.dynamic, Namespaces: []string{gwNamespace, srcNamespace}, Identity: identity})
	if err != nil {
		t.Fatal(err)
	}
	h.reg = metrics.NewKubeRegistry()
	c.Metrics().Register(h.reg)
	cctx, ccancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { c.Run(cctx) })
	stop = sync.OnceFunc(func() { ccancel(); wg.Wait() })
	t.Cleanup(stop)
	return c, stop
}

// metric is the value of a sample of the harness's registry whose labels
// include want, or -1.
func metric(t *testing.T, reg metrics.KubeRegistry, name string, want map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.Metric {
			got := map[string]string{}
			for _, l := range m.Label {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue next
				}
			}
			return value(m)
		}
	}
	return -1
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	return -1
}

func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func capiKubeconfig(cluster string, uid types.UID) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: srcNamespace, Name: cluster + "-kubeconfig", UID: uid, ResourceVersion: "1",
			Labels: map[string]string{capiClusterLabel: cluster}},
		Type: capiSecretType,
		Data: map[string][]byte{"value": []byte("apiVersion: v1\nkind: Config\n")},
	}
}

func (h *harness) gateway(name string) (*v1alpha1.ClusterGateway, error) {
	g, err := h.store.Get(name)
	if err != nil {
		return nil, err
	}
	return g.Object, nil
}

func (h *harness) waitGone(t *testing.T, name string) {
	t.Helper()
	eventually(t, "gateway "+name+" deleted", func() error {
		if _, err := h.gateway(name); !apierrors.IsNotFound(err) {
			return fmt.Errorf("get: %v, want NotFound", err)
		}
		return nil
	})
}

// The CAPI sync creates a gateway per kubeconfig Secret, marks it, keeps what
// others set on it, follows a recreated Secret, deletes it with its Secret,
// garbage-collects its own orphans on start and never touches a gateway it
// does not own.
func TestSyncCAPI(t *testing.T) {
	ctx := t.Context()
	orphan := synced(SourceCAPI, &metav1.ObjectMeta{Namespace: srcNamespace, Name: "gone-kubeconfig", UID: "old"}, v1alpha1.ClusterGatewaySpec{
		Credential: v1alpha1.Credential{Type: v1alpha1.CredentialSecretRef, SecretRef: &v1alpha1.SecretReference{Namespace: srcNamespace, Name: "gone-kubeconfig"}}})
	notCAPI := capiKubeconfig("other", "u2")
	notCAPI.Name = "other-ca" // CAPI's other Secrets share the type and label
	wrongType := capiKubeconfig("opaque", "u3")
	wrongType.Type = corev1.SecretTypeOpaque
	h := newHarness(t, capiKubeconfig("one", "u1"), capiKubeconfig("taken", "u4"), notCAPI, wrongType)
	h.store = gateways.NewStore(h.client, gwNamespace, gwNamespace, srcNamespace)
	sctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { h.store.Run(sctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	eventually(t, "store synced", func() error {
		if !h.store.HasSynced() {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	// A hand-made gateway with the name the sync would give "taken", and an orphan of the sync's.
	handmade := &v1alpha1.ClusterGateway{ObjectMeta: metav1.ObjectMeta{Name: GatewayName(srcNamespace, "taken"), Labels: map[string]string{"team": "a"}},
		Spec: v1alpha1.ClusterGatewaySpec{Endpoint: v1alpha1.Endpoint{Address: "https://10.0.0.1:6443"}, Credential: v1alpha1.Credential{Type: v1alpha1.CredentialBearerToken, BearerToken: "t"}}}
	v1alpha1.SetDefaults_ClusterGateway(handmade)
	if _, err := h.store.Create(ctx, handmade, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.CreateOwned(ctx, orphan, ownerOf(SourceCAPI, srcNamespace+"/gone-kubeconfig", orphan)); err != nil {
		t.Fatal(err)
	}
	hand, _ := h.store.Get(handmade.Name)

	h.start(t, "a", SourceCAPI)
	one := GatewayName(srcNamespace, "one")
	eventually(t, "gateway for one-kubeconfig", func() error {
		_, err := h.gateway(one)
		return err
	})
	gw, _ := h.gateway(one)
	if ref := gw.Spec.Credential.SecretRef; gw.Spec.Credential.Type != v1alpha1.CredentialSecretRef || ref == nil ||
		*ref != (v1alpha1.SecretReference{Namespace: srcNamespace, Name: "one-kubeconfig", Format: v1alpha1.SecretFormatKubeconfig}) || gw.Spec.Endpoint.Address != "" {
		t.Errorf("synced gateway spec = %+v, want a SecretRef to %s/one-kubeconfig (Kubeconfig) and no address", gw.Spec, srcNamespace)
	}
	if gw.Labels[LabelSyncedFrom] != "capi" || gw.Annotations[AnnotationSource] != srcNamespace+"/one-kubeconfig" || gw.Annotations[AnnotationSourceUID] != "u1" {
		t.Errorf("synced gateway labels %v, annotations %v: want synced-from capi and the source", gw.Labels, gw.Annotations)
	}
	h.waitGone(t, orphan.Name)
	for _, n := range []string{GatewayName(srcNamespace, "other"), GatewayName(srcNamespace, "other-ca"), GatewayName(srcNamespace, "opaque")} {
		if _, err := h.gateway(n); !apierrors.IsNotFound(err) {
			t.Errorf("a gateway %s for a Secret that is not a CAPI kubeconfig: %v", n, err)
		}
	}
	eventually(t, "the collision counted", func() error {
		if v := metric(t, h.reg, "cluster_gateway_inventory_collisions", map[string]string{"source": "capi"}); v != 1 {
			return fmt.Errorf("collisions = %v, want 1", v)
		}
		return nil
	})
	if now, _ := h.store.Get(handmade.Name); now.Object.ResourceVersion != hand.Object.ResourceVersion || now.Object.Labels[LabelSyncedFrom] != "" {
		t.Errorf("the hand-made gateway was written: %+v", now.Object)
	}

	// What others set on a synced gateway stays; what the sync owns comes back.
	cur, err := h.store.GetCurrent(ctx, one)
	if err != nil {
		t.Fatal(err)
	}
	edited := cur.Object.DeepCopy()
	edited.Labels["team"] = "b"
	edited.Spec.Impersonation.Mode = v1alpha1.ImpersonationCaller
	edited.Spec.Credential.SecretRef.Format = v1alpha1.SecretFormatToken
	if _, err := h.store.Update(ctx, edited, cur, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the owned field restored", func() error {
		gw, err := h.gateway(one)
		if err != nil {
			return err
		}
		if gw.Spec.Credential.SecretRef.Format != v1alpha1.SecretFormatKubeconfig {
			return fmt.Errorf("format %q", gw.Spec.Credential.SecretRef.Format)
		}
		if gw.Labels["team"] != "b" || gw.Spec.Impersonation.Mode != v1alpha1.ImpersonationCaller {
			return fmt.Errorf("others' fields lost: labels %v, impersonation %q", gw.Labels, gw.Spec.Impersonation.Mode)
		}
		return nil
	})

	// The Secret recreated: the same gateway, the new UID.
	secrets := h.client.CoreV1().Secrets(srcNamespace)
	if err := secrets.Delete(ctx, "one-kubeconfig", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitGone(t, one)
	if _, err := secrets.Create(ctx, capiKubeconfig("one", "u5"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the gateway recreated with the new UID", func() error {
		gw, err := h.gateway(one)
		if err != nil {
			return err
		}
		if gw.Annotations[AnnotationSourceUID] != "u5" {
			return fmt.Errorf("source UID %q", gw.Annotations[AnnotationSourceUID])
		}
		return nil
	})
	if v := metric(t, h.reg, "cluster_gateway_inventory_gateways", map[string]string{"source": "capi"}); v != 1 {
		t.Errorf("synced gateways = %v, want 1", v)
	}
	// The hand-made gateway is never deleted, even once its rival's Secret goes.
	if err := secrets.Delete(ctx, "taken-kubeconfig", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the collision cleared", func() error {
		if v := metric(t, h.reg, "cluster_gateway_inventory_collisions", map[string]string{"source": "capi"}); v != 0 {
			return fmt.Errorf("collisions = %v, want 0", v)
		}
		return nil
	})
	if _, err := h.gateway(handmade.Name); err != nil {
		t.Errorf("the hand-made gateway: %v", err)
	}
}

// A ClusterProfile naming a configured provider gets a Provider gateway with
// the provider's cluster as endpoint and its exec extension as config; one
// naming none, asking for no TLS verification, naming a CA file on the
// gateway's disk, with an exec extension over the config bound, an
// additional-args extension that is not a list of strings, or an
// additional-envs extension naming LD_PRELOAD, gets none. KEP-5339's
// additional args and environment are carried into the gateway.
func TestSyncClusterProfile(t *testing.T) {
	ctx := t.Context()
	ca := testpki.MustCA(t, "prod-ca").CertPEM
	h := newHarness(t)
	h.start(t, "a", SourceClusterProfile)
	profiles := h.dynamic.Resource(ClusterProfileResource).Namespace(srcNamespace)
	for _, p := range []*unstructured.Unstructured{
		profile("prod", map[string]any{"name": "other", "cluster": map[string]any{"server": "https://10.0.0.9"}},
			map[string]any{"name": "eks", "cluster": map[string]any{
				"server": "https://10.0.0.2:443", "certificate-authority-data": base64.StdEncoding.EncodeToString(ca), "tls-server-name": "api.prod",
				"extensions": []any{map[string]any{"name": execExtension, "extension": map[string]any{"clusterName": "prod", "region": "eu-west-1"}},
					map[string]any{"name": additionalArgsExtension, "extension": []any{"--cluster", "prod"}},
					map[string]any{"name": additionalEnvsExtension, "extension": map[string]any{"REGION": "eu-west-1", "AWS_PROFILE": "fleet"}}},
			}}),
		profile("badargs", map[string]any{"name": "eks", "cluster": map[string]any{
			"server": "https://10.0.0.6", "certificate-authority-data": base64.StdEncoding.EncodeToString(ca),
			"extensions": []any{map[string]any{"name": additionalArgsExtension, "extension": map[string]any{"cluster": "prod"}}},
		}}),
		profile("preload", map[string]any{"name": "eks", "cluster": map[string]any{
			"server": "https://10.0.0.7", "certificate-authority-data": base64.StdEncoding.EncodeToString(ca),
			"extensions": []any{map[string]any{"name": additionalEnvsExtension, "extension": map[string]any{"LD_PRELOAD": "/tmp/evil.so"}}},
		}}),
		profile("unknown", map[string]any{"name": "other", "cluster": map[string]any{"server": "https://10.0.0.9"}}),
		profile("insecure", map[string]any{"name": "eks", "cluster": map[string]any{"server": "https://10.0.0.3", "insecure-skip-tls-verify": true}}),
		profile("cafile", map[string]any{"name": "eks", "cluster": map[string]any{"server": "https://10.0.0.4", "certificate-authority": "/etc/ssl/certs/ca-certificates.crt"}}),
		profile("bigconfig", map[string]any{"name": "eks", "cluster": map[string]any{
			"server": "https://10.0.0.5", "certificate-authority-data": base64.StdEncoding.EncodeToString(ca),
			"extensions": []any{map[string]any{"name": execExtension, "extension": map[string]any{"pad": strings.Repeat("x", v1alpha1.MaxProviderConfigBytes)}}},
		}}),
	} {
		if _, err := profiles.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	name := GatewayName(srcNamespace, "prod")
	eventually(t, "gateway for ClusterProfile prod", func() error {
		_, err := h.gateway(name)
		return err
	})
	gw, _ := h.gateway(name)
	ep, p := gw.Spec.Endpoint, gw.Spec.Credential.Provider
	if gw.Spec.Credential.Type != v1alpha1.CredentialProvider || p == nil || p.Name != "eks" || p.Config == nil ||
		!strings.Contains(string(p.Config.Raw), `"region":"eu-west-1"`) {
		t.Errorf("credential = %+v, want provider eks with the exec extension as config", gw.Spec.Credential)
	}
	if !slices.Equal(p.AdditionalArgs, []string{"--cluster", "prod"}) ||
		!slices.Equal(p.AdditionalEnv, []v1alpha1.ProviderEnvVar{{Name: "AWS_PROFILE", Value: "fleet"}, {Name: "REGION", Value: "eu-west-1"}}) {
		t.Errorf("provider args %q, env %+v; want KEP-5339's additional-args and additional-envs (sorted by name)", p.AdditionalArgs, p.AdditionalEnv)
	}
	if ep.Address != "https://10.0.0.2:443" || string(ep.CABundle) != string(ca) || ep.ServerName != "api.prod" {
		t.Errorf("endpoint = %+v, want the eks provider's cluster", ep)
	}
	if gw.Labels[LabelSyncedFrom] != "clusterprofile" || gw.Annotations[AnnotationSource] != srcNamespace+"/prod" {
		t.Errorf("labels %v, annotations %v", gw.Labels, gw.Annotations)
	}
	eventually(t, "the insecure, the CA-file, the too-large-config, the bad-args and the LD_PRELOAD profiles counted as invalid", func() error {
		if v := metric(t, h.reg, "cluster_gateway_inventory_sync_errors_total", map[string]string{"source": "clusterprofile", "reason": "InvalidSource"}); v < 5 {
			return fmt.Errorf("errors = %v", v)
		}
		return nil
	})
	for _, n := range []string{"unknown", "insecure", "cafile", "bigconfig", "badargs", "preload"} {
		if _, err := h.gateway(GatewayName(srcNamespace, n)); !apierrors.IsNotFound(err) {
			t.Errorf("gateway for profile %s: %v, want none", n, err)
		}
	}
	if err := profiles.Delete(ctx, "prod", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitGone(t, name)
}

// Two controllers, one Lease: only the leader writes; when it stops, the
// other takes over and syncs.
func TestOneLeaderSyncs(t *testing.T) {
	ctx := t.Context()
	h := newHarness(t, capiKubeconfig("one", "u1"))
	a, stopA := h.start(t, "a", SourceCAPI)
	regA := h.reg
	// b starts once a holds the Lease: which of two new replicas wins is
	// not what this test is about.
	eventually(t, "a to hold the Lease", func() error {
		if la := metric(t, regA, "cluster_gateway_inventory_leader", nil); la != 1 {
			return fmt.Errorf("leader gauge of a = %v", la)
		}
		return nil
	})
	// b on the same hub and store, stopped by hand below.
	o := a.cfg.Config
	b, err := New(Params{Config: o, Store: h.store, Client: h.client, Namespaces: []string{gwNamespace, srcNamespace}, Identity: "b"})
	if err != nil {
		t.Fatal(err)
	}
	regB := metrics.NewKubeRegistry()
	b.Metrics().Register(regB)
	bctx, bcancel := context.WithCancel(context.Background())
	var bwg sync.WaitGroup
	bwg.Go(func() { b.Run(bctx) })
	t.Cleanup(func() { bcancel(); bwg.Wait() })

	eventually(t, "gateway created by a", func() error {
		_, err := h.gateway(GatewayName(srcNamespace, "one"))
		return err
	})
	if la, lb := metric(t, regA, "cluster_gateway_inventory_leader", nil), metric(t, regB, "cluster_gateway_inventory_leader", nil); la != 1 || lb != 0 {
		t.Fatalf("leader gauges a=%v b=%v, want 1 and 0", la, lb)
	}
	if _, err := h.client.CoreV1().Secrets(srcNamespace).Create(ctx, capiKubeconfig("two", "u2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "gateway two created", func() error {
		_, err := h.gateway(GatewayName(srcNamespace, "two"))
		return err
	})
	if w := metric(t, regB, "cluster_gateway_inventory_writes_total", nil); w > 0 {
		t.Errorf("the replica without the Lease wrote %v times", w)
	}

	// a stops (its Lease released): b leads and syncs a new Secret.
	stopA()
	if _, err := h.client.CoreV1().Secrets(srcNamespace).Create(ctx, capiKubeconfig("three", "u3"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b leads and creates gateway three", func() error {
		if _, err := h.gateway(GatewayName(srcNamespace, "three")); err != nil {
			return err
		}
		if v := metric(t, regB, "cluster_gateway_inventory_writes_total", map[string]string{"operation": "create"}); v != 1 {
			return fmt.Errorf("b's creates = %v, want 1", v)
		}
		return nil
	})
}

// profile is a ClusterProfile in srcNamespace with status.accessProviders.
func profile(name string, providers ...map[string]any) *unstructured.Unstructured {
	aps := make([]any, len(providers))
	for i, p := range providers {
		aps[i] = p
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
		"metadata": map[string]any{"namespace": srcNamespace, "name": name, "uid": "uid-" + name},
		"spec":     map[string]any{"clusterManager": map[string]any{"name": "test"}},
		"status":   map[string]any{"accessProviders": aps},
	}}
}
