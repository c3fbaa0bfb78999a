package inventory

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-base/metrics"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/endpointpolicy"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
	"github.com/clustergateway/cluster-gateway/pkg/registry/clustergateway"
)

// syncer is a Controller whose informers and store run but which does not
// campaign: the test calls sync itself, so it knows the sync has run.
func (h *harness) syncer(t *testing.T, sources ...Source) *Controller {
	t.Helper()
	h.store = gateways.NewStore(h.client, gwNamespace, gwNamespace, srcNamespace)
	o := Config{Providers: []string{"eks"}}
	for _, s := range sources {
		o.Sources = append(o.Sources, string(s))
	}
	c, err := New(Params{Config: o, Store: h.store, Client: h.client, Dynamic: h.dynamic, Namespaces: []string{gwNamespace, srcNamespace}, Identity: "t"})
	if err != nil {
		t.Fatal(err)
	}
	h.reg = metrics.NewKubeRegistry()
	c.Metrics().Register(h.reg)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() { h.store.Run(ctx) })
	synced := []cache.InformerSynced{h.store.HasSynced}
	for _, infs := range c.informers {
		for _, inf := range infs {
			wg.Go(func() { inf.RunWithContext(ctx) })
			synced = append(synced, inf.HasSynced)
		}
	}
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	if !cache.WaitForCacheSync(sctx.Done(), synced...) {
		t.Fatal("caches not synced")
	}
	return c
}

// mustSync runs the sync of one inventory object now.
func mustSync(t *testing.T, c *Controller, src Source, object string) {
	t.Helper()
	if err := c.sync(t.Context(), key(src, object)); err != nil {
		t.Fatalf("sync %s %s: %v", src, object, err)
	}
}

// patch is what the API's handler hands its REST for a merge patch.
type patch string

func (p patch) Preconditions() *metav1.Preconditions { return nil }
func (p patch) UpdatedObject(_ context.Context, old runtime.Object) (runtime.Object, error) {
	raw, err := json.Marshal(old)
	if err != nil {
		return nil, err
	}
	out, err := strategicpatch.StrategicMergePatch(raw, []byte(p), &v1alpha1.ClusterGateway{})
	if err != nil {
		return nil, err
	}
	gw := &v1alpha1.ClusterGateway{}
	return gw, json.Unmarshal(out, gw)
}

var _ rest.UpdatedObjectInfo = patch("")

func asUser(name string) context.Context {
	return genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: name})
}

// forge gives gateway name the sync's marks for object of src: through the
// API as mallory, who may patch ClusterGateways and nothing else, which must
// refuse; then as they would be stored had the API let them through (and as
// versions before owner records stored them): through the store's API write.
func (h *harness) forge(t *testing.T, name string, src Source, object string, uid types.UID) {
	t.Helper()
	policy, _ := endpointpolicy.DefaultConfig().Policy()
	api := clustergateway.NewREST(h.store, policy, nil, authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionNoOpinion, "mallory may only patch ClusterGateways", nil
	}))
	marks := patch(`{"metadata":{"labels":{"` + LabelSyncedFrom + `":"` + string(src) + `"},"annotations":{"` + AnnotationSource + `":"` + object + `","` + AnnotationSourceUID + `":"` + string(uid) + `"}}}`)
	if _, _, err := api.Update(asUser("mallory"), name, marks, nil, nil, false, &metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), LabelSyncedFrom) {
		t.Errorf("the API let mallory write the sync's marks on %s: %v; want 422 naming %s", name, err, LabelSyncedFrom)
	}
	cur, err := h.store.GetCurrent(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	gw := cur.Object.DeepCopy()
	gw.Labels = map[string]string{LabelSyncedFrom: string(src)}
	gw.Annotations = map[string]string{AnnotationSource: object, AnnotationSourceUID: string(uid)}
	if _, err := h.store.Update(t.Context(), gw, cur, nil); err != nil {
		t.Fatal(err)
	}
	// The fake clientset keeps resourceVersions: wait for the cache itself.
	eventually(t, "the marks in the store's cache", func() error {
		if g, err := h.gateway(name); err != nil || g.Annotations[AnnotationSource] != object {
			return fmt.Errorf("%v", err)
		}
		return nil
	})
}

func (h *harness) handmade(t *testing.T, name string) *v1alpha1.ClusterGateway {
	t.Helper()
	gw := &v1alpha1.ClusterGateway{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ClusterGatewaySpec{Endpoint: v1alpha1.Endpoint{Address: "https://10.0.0.1:6443"},
			Credential: v1alpha1.Credential{Type: v1alpha1.CredentialBearerToken, BearerToken: "admins-own-token"}}}
	v1alpha1.SetDefaults_ClusterGateway(gw)
	if _, err := h.store.Create(t.Context(), gw, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the gateway in the store's cache", func() error {
		_, err := h.gateway(name)
		return err
	})
	return gw
}

// Marks a weaker writer puts on an admin's gateway hand the sync nothing:
// with the marks of a Cluster API Secret or ClusterProfile whose gateway
// name it has (its UID too), it is not rewritten to that source's endpoint
// and credential; with the marks of a source that does not exist, it is not
// deleted. The sync reads only its owner record, which no API write sets.
func TestForgedMarksGrantNothing(t *testing.T) {
	h := newHarness(t, capiKubeconfig("prod", "u1"))
	if _, err := h.dynamic.Resource(ClusterProfileResource).Namespace(srcNamespace).Create(t.Context(),
		profile("edge", map[string]any{"name": "eks", "cluster": map[string]any{"server": "https://10.0.0.7:443"}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c := h.syncer(t, SourceCAPI, SourceClusterProfile)
	for _, tc := range []struct {
		name, object string
		src          Source
		uid          types.UID
		exists       bool
	}{
		{GatewayName(srcNamespace, "prod"), srcNamespace + "/prod-kubeconfig", SourceCAPI, "u1", true},
		{GatewayName(srcNamespace, "edge"), srcNamespace + "/edge", SourceClusterProfile, "uid-edge", true},
		{GatewayName(srcNamespace, "ghost"), srcNamespace + "/ghost-kubeconfig", SourceCAPI, "u9", false},
		{GatewayName(srcNamespace, "gone"), srcNamespace + "/gone", SourceClusterProfile, "uid-gone", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.handmade(t, tc.name)
			h.forge(t, tc.name, tc.src, tc.object, tc.uid)
			before, err := h.store.Get(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			mustSync(t, c, tc.src, tc.object)
			after, err := h.store.GetCurrent(t.Context(), tc.name)
			if err != nil {
				t.Fatalf("the gateway with forged marks of a source that exists=%v: %v; want it kept", tc.exists, err)
			}
			if after.Object.ResourceVersion != before.Object.ResourceVersion || after.Object.UID != before.Object.UID ||
				after.Object.Spec.Credential.Type != v1alpha1.CredentialBearerToken || after.Object.Spec.Endpoint.Address != "https://10.0.0.1:6443" {
				t.Errorf("the sync wrote a gateway it does not own: %+v", after.Object.Spec)
			}
			if _, ok := after.Owner(); ok {
				t.Errorf("the forged gateway has an owner record")
			}
			if got := c.collisionsBySource()[tc.src]; tc.exists && got != 1 {
				t.Errorf("collisions of %s = %d, want 1: the source gets no gateway while another holds its name", tc.src, got)
			}
		})
	}
	// A new leader's first pass (every object, every gateway) changes nothing either.
	syncAll(t, c)
	for _, n := range []string{"prod", "edge", "ghost", "gone"} {
		g, err := h.store.GetCurrent(t.Context(), GatewayName(srcNamespace, n))
		if err != nil || g.Object.Spec.Credential.Type != v1alpha1.CredentialBearerToken {
			t.Errorf("after a full pass, gateway %s: %v", n, err)
		}
	}
}

// syncAll runs what a new leader runs first: the sync of every inventory
// object and of every gateway's.
func syncAll(t *testing.T, c *Controller) {
	t.Helper()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer q.ShutDown()
	c.enqueueAll(q)
	for q.Len() > 0 {
		k, _ := q.Get()
		if err := c.sync(t.Context(), k); err != nil {
			t.Fatalf("sync %s: %v", k, err)
		}
		q.Done(k)
	}
}

// capiGatewayOf is the gateway the sync writes for Cluster API Secret
// <cluster>-kubeconfig of UID uid.
func capiGatewayOf(cluster string, uid types.UID) *v1alpha1.ClusterGateway {
	return capiGateway(capiSecret(capiKubeconfig(cluster, uid)))
}

// waitCached waits until the store's cache has gateway name as fn wants it.
func (h *harness) waitCached(t *testing.T, name string, fn func(*gateways.Gateway) bool) {
	t.Helper()
	eventually(t, "gateway "+name+" in the store's cache", func() error {
		g, err := h.store.Get(name)
		if err != nil {
			return err
		}
		if !fn(g) {
			return fmt.Errorf("not yet")
		}
		return nil
	})
}

// The owner record decides, and its UID: a gateway owned for an object that
// was deleted and recreated is deleted and made anew for the new object
// (others' labels on the old one do not carry over); a gateway an earlier
// version synced (marks, no record) is adopted only when it is exactly what
// the sync writes for the object as it is now (then only the record is
// written), and otherwise left alone, also when its source is gone.
func TestOwnerRecordDecides(t *testing.T) {
	ctx := t.Context()
	h := newHarness(t, capiKubeconfig("replaced", "new-uid"), capiKubeconfig("legacy", "u3"), capiKubeconfig("changed", "u4"), capiKubeconfig("olduid", "u5"))
	c := h.syncer(t, SourceCAPI)
	obj := func(cluster string) string { return srcNamespace + "/" + cluster + "-kubeconfig" }

	replaced := capiGatewayOf("replaced", "old-uid")
	replaced.Labels["team"] = "a"
	first, err := h.store.CreateOwned(ctx, replaced, ownerOf(SourceCAPI, obj("replaced"), replaced))
	if err != nil {
		t.Fatal(err)
	}
	// Earlier versions' gateways: the sync's marks, no record.
	legacy := map[string]*v1alpha1.ClusterGateway{
		"legacy":  capiGatewayOf("legacy", "u3"),  // exactly what the sync writes
		"changed": capiGatewayOf("changed", "u4"), // its credential changed since
		"olduid":  capiGatewayOf("olduid", "u0"),  // made for an earlier Secret of that name
		"gone":    capiGatewayOf("gone", "u6"),    // its Secret is gone
	}
	legacy["changed"].Spec.Credential.SecretRef.Format = v1alpha1.SecretFormatToken
	before := map[string]string{}
	for n, gw := range legacy {
		g, err := h.store.Create(ctx, gw, nil)
		if err != nil {
			t.Fatal(err)
		}
		h.waitCached(t, gw.Name, func(*gateways.Gateway) bool { return true })
		before[n] = g.Object.ResourceVersion
	}
	h.waitCached(t, replaced.Name, func(g *gateways.Gateway) bool { _, ok := g.Owner(); return ok })

	mustSync(t, c, SourceCAPI, obj("replaced"))
	h.waitCached(t, replaced.Name, func(g *gateways.Gateway) bool { o, _ := g.Owner(); return o.UID == "new-uid" })
	now, _ := h.store.Get(replaced.Name)
	if now.Object.UID == first.Object.UID && first.Object.UID != "" || now.Object.Labels["team"] != "" ||
		now.Object.Annotations[AnnotationSourceUID] != "new-uid" {
		t.Errorf("the gateway of a replaced Secret: uid %s (was %s), labels %v, annotations %v; want a new gateway for the new Secret",
			now.Object.UID, first.Object.UID, now.Object.Labels, now.Object.Annotations)
	}
	if w := metric(t, h.reg, "cluster_gateway_inventory_writes_total", map[string]string{"operation": "delete"}); w != 1 {
		t.Errorf("deletes = %v, want 1 (the old gateway)", w)
	}

	for _, n := range []string{"legacy", "changed", "olduid"} {
		mustSync(t, c, SourceCAPI, obj(n))
	}
	mustSync(t, c, SourceCAPI, obj("gone"))
	syncAll(t, c)
	name := func(n string) string { return GatewayName(srcNamespace, n) }
	h.waitCached(t, name("legacy"), func(g *gateways.Gateway) bool { _, ok := g.Owner(); return ok })
	g, _ := h.store.Get(name("legacy"))
	if o, _ := g.Owner(); o != (gateways.Owner{Source: "capi", Object: obj("legacy"), UID: "u3"}) || !upToDate(g.Object, capiGatewayOf("legacy", "u3")) {
		t.Errorf("the adopted gateway: owner %+v, spec %+v", o, g.Object.Spec)
	}
	for _, n := range []string{"changed", "olduid", "gone"} {
		cur, err := h.store.GetCurrent(ctx, name(n))
		if err != nil {
			t.Errorf("an earlier version's gateway that the sync may not adopt (%s): %v; want it kept", n, err)
			continue
		}
		if _, ok := cur.Owner(); ok || cur.Object.ResourceVersion != before[n] {
			t.Errorf("an earlier version's gateway that the sync may not adopt (%s) was written", n)
		}
	}
	if got := c.collisionsBySource()[SourceCAPI]; got != 2 {
		t.Errorf("collisions = %d, want 2 (changed, olduid)", got)
	}
}
