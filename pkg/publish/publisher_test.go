package publish

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
	"github.com/clustergateway/cluster-gateway/pkg/clusters"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
	"github.com/clustergateway/cluster-gateway/pkg/health"
	"github.com/clustergateway/cluster-gateway/pkg/inventory"
	"github.com/clustergateway/cluster-gateway/pkg/pool"
)

const (
	testGWNamespace = "gw"
	testFleet       = "fleet"
)

// pubHarness is a Publisher on fake hub clients whose store and informers
// run; the test calls sync itself, so it knows a pass has run.
type pubHarness struct {
	p        *Publisher
	dyn      *dynamicfake.FakeDynamicClient
	profiles dynamic.ResourceInterface
	reg      metrics.KubeRegistry
}

func gatewaySecret(name string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: testGWNamespace, Name: name, Labels: map[string]string{gateways.LabelGateway: "true"}},
		Data:       map[string][]byte{"endpoint": []byte("https://127.0.0.9:6443"), "credential-type": []byte("BearerToken"), "token": []byte("t")},
	}
}

func newPubHarness(t *testing.T, caFile string, gws ...string) *pubHarness {
	t.Helper()
	var objs []runtime.Object
	for _, n := range gws {
		objs = append(objs, gatewaySecret(n))
	}
	client := fake.NewClientset(objs...)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{inventory.ClusterProfileResource: "ClusterProfileList"})
	store := gateways.NewStore(client, testGWNamespace)
	// As pkg/apiserver wires it: the publisher follows the clusters'
	// records, and the prober is built over them.
	pl, err := pool.New(*pool.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pl.Close)
	owner, err := clusters.New(clusters.Config{Store: store, Pool: pl})
	if err != nil {
		t.Fatal(err)
	}
	prober, err := health.New(*health.DefaultConfig(), owner, func(context.Context, string) health.Outcome { return health.Outcome{} })
	if err != nil {
		t.Fatal(err)
	}
	opts := Config{Enabled: true, Namespace: testFleet, ProviderName: DefaultProviderName, HubServer: "https://hub.example.com:6443", HubCAFile: caFile}
	p, err := New(Params{Config: opts, Store: store, Clusters: owner, Prober: prober, Client: client, Dynamic: dyn})
	if err != nil {
		t.Fatal(err)
	}
	h := &pubHarness{p: p, dyn: dyn, profiles: dyn.Resource(inventory.ClusterProfileResource).Namespace(testFleet), reg: metrics.NewKubeRegistry()}
	p.Metrics().Register(h.reg)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() { store.Run(ctx) })
	wg.Go(func() { p.RunInformers(ctx) })
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	defer pcancel()
	if err := p.Prepare(pctx); err != nil {
		t.Fatal(err)
	}
	return h
}

// mustSync runs one publisher pass of gateway gw.
func (h *pubHarness) mustSync(t *testing.T, gw string) {
	t.Helper()
	if err := h.p.sync(t.Context(), gw); err != nil {
		t.Fatalf("sync %s: %v", gw, err)
	}
}

// waitCached waits until the publisher's informer holds the profile as ok says.
func (h *pubHarness) waitCached(t *testing.T, name string, ok func(*unstructured.Unstructured) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if pr := h.p.profile(testFleet, name); pr != nil && ok(pr) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the publisher's cache never had profile %s/%s as wanted (has %v)", testFleet, name, h.p.profile(testFleet, name))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// writes are the patches, updates, creates and deletes sent to the hub.
func (h *pubHarness) writes() int {
	n := 0
	for _, a := range h.dyn.Actions() {
		switch a.(type) {
		case clienttesting.PatchAction, clienttesting.UpdateAction, clienttesting.CreateAction, clienttesting.DeleteAction:
			n++
		}
	}
	return n
}

func (h *pubHarness) get(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	pr, err := h.profiles.Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pr
}

// published creates the profile of gateway c1 and writes its entry, as two passes do.
func (h *pubHarness) published(t *testing.T) {
	t.Helper()
	h.mustSync(t, "c1")
	h.waitCached(t, "c1", func(*unstructured.Unstructured) bool { return true })
	h.mustSync(t, "c1")
	h.waitCached(t, "c1", func(pr *unstructured.Unstructured) bool { return entryOf(pr) != nil })
}

func entryOf(pr *unstructured.Unstructured) map[string]any {
	aps, _, _ := unstructured.NestedSlice(pr.Object, "status", "accessProviders")
	for _, e := range aps {
		if m, _ := e.(map[string]any); m != nil && m["name"] == DefaultProviderName {
			return m
		}
	}
	return nil
}

// A ClusterProfile writer who changes or removes the cluster-manager label
// or spec.clusterManager of a profile the publisher owns gets them put back
// on the next pass; the writer's other labels and the profile's status stay,
// and a pass over a profile as it should be writes nothing.
func TestOwnedProfileMarksPutBack(t *testing.T) {
	h := newPubHarness(t, "", "c1")
	h.published(t)
	for name, edit := range map[string]func(pr *unstructured.Unstructured){
		"label changed, spec.clusterManager changed": func(pr *unstructured.Unstructured) {
			pr.SetLabels(map[string]string{LabelClusterManager: "someone-else", "team": "a"})
			_ = unstructured.SetNestedField(pr.Object, "someone-else", "spec", "clusterManager", "name")
		},
		"label removed, spec.clusterManager removed": func(pr *unstructured.Unstructured) {
			pr.SetLabels(map[string]string{"team": "a"})
			unstructured.RemoveNestedField(pr.Object, "spec", "clusterManager")
		},
		"no labels, no spec": func(pr *unstructured.Unstructured) {
			pr.SetLabels(nil)
			delete(pr.Object, "spec")
		},
	} {
		t.Run(name, func(t *testing.T) {
			pr := h.get(t, "c1")
			edit(pr)
			edited, err := h.profiles.Update(t.Context(), pr, metav1.UpdateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			h.waitCached(t, "c1", func(c *unstructured.Unstructured) bool { return sameJSON(c.GetLabels(), edited.GetLabels()) })
			h.mustSync(t, "c1")
			got := h.get(t, "c1")
			if v := got.GetLabels()[LabelClusterManager]; v != ClusterManagerName {
				t.Errorf("label %s=%q after the pass, want %q put back", LabelClusterManager, v, ClusterManagerName)
			}
			if m, _, _ := unstructured.NestedString(got.Object, "spec", "clusterManager", "name"); m != ClusterManagerName {
				t.Errorf("spec.clusterManager.name %q after the pass, want %q put back", m, ClusterManagerName)
			}
			if want := edited.GetLabels()["team"]; got.GetLabels()["team"] != want {
				t.Errorf("the writer's label team=%q became %q: want it kept", want, got.GetLabels()["team"])
			}
			if entryOf(got) == nil {
				t.Errorf("the entry is gone: %v", got.Object["status"])
			}
			h.waitCached(t, "c1", func(c *unstructured.Unstructured) bool {
				return c.GetLabels()[LabelClusterManager] == ClusterManagerName
			})
			before := h.writes()
			h.mustSync(t, "c1")
			if n := h.writes() - before; n != 0 {
				t.Errorf("a pass over a profile as it should be sent %d writes, want none", n)
			}
		})
	}
}

// The marks put back are those of markOps, and no operation is made when
// they are as created.
func TestMarkOps(t *testing.T) {
	if ops := markOps(newProfile("fleet", "c1")); ops != nil {
		t.Errorf("a profile as created: ops %+v, want none", ops)
	}
	pr := newProfile("fleet", "c1")
	pr.SetResourceVersion("7")
	pr.SetLabels(map[string]string{"a/b~c": "x"})
	_ = unstructured.SetNestedField(pr.Object, "other", "spec", "clusterManager", "name")
	ops := markOps(pr)
	if len(ops) != 3 || ops[0].Path != "/metadata/resourceVersion" || ops[0].Value != "7" || !strings.HasSuffix(ops[1].Path, "x-k8s.io~1cluster-manager") {
		t.Fatalf("ops %+v: want the resourceVersion precondition, the label (its '/' escaped) and spec.clusterManager", ops)
	}
}

// A changed hub CA file is published into the entries on the next pass;
// a bad file (a private key in it, or nothing) keeps the last good CA, with
// the failure counted once per problem and the gauge at 0 until a good file.
func TestHubCAReload(t *testing.T) {
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.crt")
	ca1, err := testpki.NewCA("hub-ca-1")
	if err != nil {
		t.Fatal(err)
	}
	ca2, err := testpki.NewCA("hub-ca-2")
	if err != nil {
		t.Fatal(err)
	}
	write := func(b []byte) {
		t.Helper()
		if err := os.WriteFile(caFile, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(ca1.CertPEM)
	h := newPubHarness(t, caFile, "c1")
	h.published(t)
	// caOf names the CA in the entry: "first", "new", or what else it is.
	caOf := func() string {
		t.Helper()
		s, _, _ := unstructured.NestedString(entryOf(h.get(t, "c1")), "cluster", "certificate-authority-data")
		switch s {
		case base64.StdEncoding.EncodeToString(ca1.CertPEM):
			return "first"
		case base64.StdEncoding.EncodeToString(ca2.CertPEM):
			return "new"
		}
		return "neither: " + s
	}
	if got := caOf(); got != "first" {
		t.Fatalf("entry CA: %s, want the first CA", got)
	}
	gauge := func() float64 {
		t.Helper()
		v, err := testutil.GetGaugeMetricValue(h.p.metrics.caOK)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	count := func(result string) float64 {
		t.Helper()
		v, err := testutil.GetCounterMetricValue(h.p.metrics.caReloads.WithLabelValues(result))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	reported := ""
	pass := func() {
		t.Helper()
		h.p.reloadHubCA(&reported)
		h.mustSync(t, "c1")
	}

	// Bad files: the first CA stays published.
	for _, bad := range [][]byte{append(append([]byte{}, ca2.CertPEM...), ca2.KeyPEM...), nil} {
		write(bad)
		pass()
		pass() // the same problem again: counted once
		if got := caOf(); got != "first" {
			t.Errorf("after a bad file the entry's CA is the %s CA; want the last good (first) CA kept", got)
		}
		if gauge() != 0 {
			t.Errorf("last_reload_successful %v after a bad file, want 0", gauge())
		}
	}
	if n := count("failure"); n != 2 {
		t.Errorf("%v failures counted for two bad contents, each seen twice: want 2", n)
	}

	// The good file is back: the gauge is 1 again, nothing is written.
	write(ca1.CertPEM)
	before := h.writes()
	pass()
	if gauge() != 1 || h.writes() != before || count("success") != 0 {
		t.Errorf("the published CA's file back: gauge %v, %d writes, %v successes; want 1, none, 0", gauge(), h.writes()-before, count("success"))
	}

	// A new CA: published.
	write(ca2.CertPEM)
	pass()
	if got := caOf(); got != "new" {
		t.Errorf("after the CA file changed the entry's CA is the %s CA, want the new CA", got)
	}
	if gauge() != 1 || count("success") != 1 {
		t.Errorf("gauge %v, successes %v: want 1 and 1", gauge(), count("success"))
	}
}
