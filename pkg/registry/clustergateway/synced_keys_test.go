package clustergateway

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
)

const (
	syncedFrom      = gateways.SyncedKeyPrefix + "from"
	syncedSource    = gateways.SyncedKeyPrefix + "source"
	syncedSourceUID = gateways.SyncedKeyPrefix + "source-uid"
)

// The inventory sync's labels and annotations cannot be added, changed or
// removed through the API, by anyone (422 naming the key), so they never say
// what the sync's owner record, which no API write reaches, does not; every
// other edit of a synced gateway is allowed and keeps the record.
func TestSyncedKeysAreNotWrittenThroughTheAPI(t *testing.T) {
	client := fake.NewClientset()
	r := restReadingSources(t, client)
	refused := func(what string, err error, key string) {
		t.Helper()
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "["+key+"]") || !strings.Contains(err.Error(), "inventory sync") {
			t.Errorf("%s: %v; want 422 naming %s", what, err, key)
		}
	}

	for _, meta := range []metav1.ObjectMeta{
		{Name: "forged-label", Labels: map[string]string{syncedFrom: "capi"}},
		{Name: "forged-annotation", Annotations: map[string]string{syncedSource: "fleet/prod-kubeconfig"}},
		{Name: "forged-other", Labels: map[string]string{gateways.SyncedKeyPrefix + "anything": "x"}},
	} {
		gw := secretRefGateway(meta.Name, "creds", "https://10.0.0.1:6443")
		gw.ObjectMeta = meta
		_, err := r.Create(as("admin"), gw, nil, &metav1.CreateOptions{})
		key := syncedSource
		for k := range meta.Labels {
			key = k
		}
		refused("a create with "+key, err, key)
	}

	// An admin's gateway, and one the sync made (its record and marks).
	storeAs(t, r, client, secretRefGateway("handmade", "creds", "https://10.0.0.1:6443"))
	synced := secretRefGateway("synced", "prod-kubeconfig", "")
	synced.Labels = map[string]string{syncedFrom: "capi", "team": "a"}
	synced.Annotations = map[string]string{syncedSource: writerTestNamespace + "/prod-kubeconfig", syncedSourceUID: "u1"}
	v1alpha1.SetDefaults_ClusterGateway(synced)
	owner := gateways.Owner{Source: "capi", Object: writerTestNamespace + "/prod-kubeconfig", UID: "u1"}
	if _, err := r.store.CreateOwned(context.Background(), synced, owner); err != nil {
		t.Fatal(err)
	}
	secrets := client.CoreV1().Secrets(writerTestNamespace)
	sec, _ := secrets.Get(context.Background(), "synced", metav1.GetOptions{})
	sec.ResourceVersion = "1"
	if _, err := secrets.Update(context.Background(), sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		what, name, key string
		change          func(*v1alpha1.ClusterGateway)
	}{
		{"adds the label", "handmade", syncedFrom, func(g *v1alpha1.ClusterGateway) { g.Labels = map[string]string{syncedFrom: "capi"} }},
		{"adds the annotations", "handmade", syncedSource, func(g *v1alpha1.ClusterGateway) {
			g.Annotations = map[string]string{syncedSource: writerTestNamespace + "/prod-kubeconfig", syncedSourceUID: "u1"}
		}},
		{"changes the label", "synced", syncedFrom, func(g *v1alpha1.ClusterGateway) { g.Labels[syncedFrom] = "clusterprofile" }},
		{"changes the source", "synced", syncedSource, func(g *v1alpha1.ClusterGateway) { g.Annotations[syncedSource] = writerTestNamespace + "/other" }},
		{"removes the label", "synced", syncedFrom, func(g *v1alpha1.ClusterGateway) { delete(g.Labels, syncedFrom) }},
		{"removes the UID", "synced", syncedSourceUID, func(g *v1alpha1.ClusterGateway) { delete(g.Annotations, syncedSourceUID) }},
		{"removes every annotation", "synced", syncedSource, func(g *v1alpha1.ClusterGateway) { g.Annotations = nil }},
	} {
		for _, who := range []string{"mallory", "admin"} {
			_, _, err := r.Update(as(who), tc.name, mutated(tc.change), nil, nil, false, &metav1.UpdateOptions{})
			refused(who+" "+tc.what+" of "+tc.name, err, tc.key)
		}
	}

	// Other labels of a synced gateway are anyone's; the record stays.
	if _, _, err := r.Update(as("mallory"), "synced", patched{`{"metadata":{"labels":{"team":"b"}}}`}, nil, nil, false, &metav1.UpdateOptions{}); err != nil {
		t.Fatalf("a label edit of a synced gateway: %v", err)
	}
	sec, err := secrets.Get(context.Background(), "synced", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g := gateways.Parse(sec)
	if o, ok := g.Owner(); !ok || o != owner {
		t.Errorf("the owner record after an API write: %+v %v, want %+v", o, ok, owner)
	}
	if g.Object.Labels["team"] != "b" || g.Object.Labels[syncedFrom] != "capi" || g.Object.Annotations[syncedSource] != owner.Object {
		t.Errorf("labels %v, annotations %v after a label edit", g.Object.Labels, g.Object.Annotations)
	}
	// Reads never show the record.
	obj, err := r.Get(as("admin"), "synced", &metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s := strings.ToLower(mustJSON(t, obj)); strings.Contains(s, gateways.KeyOwner) {
		t.Errorf("a read shows the owner record: %s", s)
	}
	// Nor can the API make a record: a create starts from an empty Secret.
	storeAs(t, r, client, secretRefGateway("plain", "creds", "https://10.0.0.1:6443"))
	sec, _ = secrets.Get(context.Background(), "plain", metav1.GetOptions{})
	if _, ok := sec.Data[gateways.KeyOwner]; ok {
		t.Errorf("an API create wrote an owner record")
	}
}

func mustJSON(t *testing.T, v interface{}) string {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}
