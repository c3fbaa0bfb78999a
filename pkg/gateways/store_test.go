package gateways

import (
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/clustergateway/cluster-gateway/internal/testgateways"
	"github.com/clustergateway/cluster-gateway/internal/testpoll"
)

// The cache serves only labelled Secrets of its namespace, parses each
// resourceVersion once, reports deletions, and its informer stops with ctx
// (goleak in TestMain checks that).
func TestCache(t *testing.T) {
	ctx := t.Context()
	c := testgateways.ValidCredential(t)
	s := mustToSecret(t, testgateways.X509Gateway(c), nil)
	// The fake clientset keeps resourceVersions as given; the cache relies
	// on them changing, as a real hub's do.
	s.ResourceVersion = "1"
	unlabelled := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: testNamespace}}
	elsewhere := s.DeepCopy()
	elsewhere.Namespace = "other"
	client := fake.NewClientset(s, unlabelled, elsewhere)

	cache := NewStore(client, testNamespace)
	deleted := make(chan string, 10)
	if err := cache.OnChange(func(old, new *Gateway) {
		if new == nil {
			deleted <- old.Name()
		}
	}); err != nil {
		t.Fatal(err)
	}
	startStore(t, cache)

	g1, err := cache.Get(s.Name)
	if err != nil || !g1.Ready {
		t.Fatalf("Get(%s) = %+v, %v; want a ready gateway", s.Name, g1, err)
	}
	if g2, _ := cache.Get(s.Name); g2 != g1 {
		t.Errorf("the same resourceVersion was parsed twice")
	}
	if _, err := cache.Get("plain"); !apierrors.IsNotFound(err) {
		t.Errorf("Get(plain) of an unlabelled Secret: %v, want NotFound", err)
	}
	gws, _, err := cache.List(nil)
	if err != nil || len(gws) != 1 {
		t.Errorf("List = %d gateways, %v; want only the labelled one in %s", len(gws), err, testNamespace)
	}

	// An update is seen and parsed again.
	upd := s.DeepCopy()
	upd.Data[KeyToken] = []byte("x") // both a certificate and a token: unusable
	upd.ResourceVersion = "2"
	if _, err := client.CoreV1().Secrets(testNamespace).Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testpoll.EventuallyTrue(t, 30*time.Second, "the update to reach the cache", func() bool {
		g, err := cache.Get(s.Name)
		return err == nil && !g.Ready
	})

	if err := client.CoreV1().Secrets(testNamespace).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case name := <-deleted:
		if name != s.Name {
			t.Errorf("OnChange reported the deletion of %q, want %q", name, s.Name)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("OnChange did not report the deleted Secret")
	}
	if _, err := cache.Get(s.Name); !apierrors.IsNotFound(err) {
		t.Errorf("Get after delete: %v, want NotFound", err)
	}
}

// A write, watch or most-recent read the hub never answers (its API server
// is down) fails with 503 naming the hub, not with an internal error; reads
// from the cache go on.
func TestWriteWhileTheHubIsDown(t *testing.T) {
	ctx := t.Context()
	c := testgateways.ValidCredential(t)
	s := mustToSecret(t, testgateways.X509Gateway(c), nil)
	s.ResourceVersion = "1"
	client := fake.NewClientset(s)
	store := NewStore(client, testNamespace)
	startStore(t, store)

	down := &url.Error{Op: "Post", URL: "https://127.0.0.1:6443/api/v1/namespaces/" + testNamespace + "/secrets", Err: syscall.ECONNREFUSED}
	for _, verb := range []string{"create", "update", "delete", "get", "list"} {
		client.PrependReactor(verb, "secrets", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, down })
	}
	client.PrependWatchReactor("secrets", func(k8stesting.Action) (bool, watch.Interface, error) { return true, nil, down })

	existing, err := store.Get(s.Name)
	if err != nil {
		t.Fatalf("a read from the cache while the hub is down: %v", err)
	}
	gw := testgateways.X509Gateway(c)
	gw.Name = "new"
	_, createErr := store.Create(ctx, gw, nil)
	_, updateErr := store.Update(ctx, existing.Object, &Current{Gateway: existing, secret: s}, nil)
	deleteErr := store.Delete(ctx, existing, metav1.DeleteOptions{})
	_, watchErr := store.Watch(ctx, WatchOptions{})
	_, getErr := store.GetFresh(ctx, s.Name)
	_, _, listErr := store.ListFresh(ctx, nil)
	if _, _, err := store.List(nil); err != nil {
		t.Errorf("a list from the cache while the hub is down: %v", err)
	}
	for what, err := range map[string]error{"create": createErr, "update": updateErr, "delete": deleteErr, "watch": watchErr, "fresh get": getErr, "fresh list": listErr} {
		if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "hub's API server") || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("%s while the hub is down: %v; want 503 naming the hub and the cause", what, err)
		}
	}
}

// A write starts from the Secret as the hub has it (GetCurrent), not from
// the cache, which keeps no Secrets: keys and metadata the gateway does not
// model survive an update, and so do the hub's labels and annotations.
func TestUpdateStartsFromTheHubsSecret(t *testing.T) {
	ctx := t.Context()
	s := mustToSecret(t, testgateways.X509Gateway(testgateways.ValidCredential(t)), nil)
	s.ResourceVersion = "1"
	s.Data["x-extra"] = []byte("kept")
	s.Labels["team"] = "platform"
	s.Annotations = map[string]string{"backup.example/policy": "daily"}
	client := fake.NewClientset(s)
	store := NewStore(client, testNamespace)
	startStore(t, store)

	cur, err := store.GetCurrent(ctx, s.Name)
	if err != nil {
		t.Fatal(err)
	}
	gw := cur.Object.DeepCopy()
	gw.Labels = map[string]string{"env": "staging"}
	if _, err := store.Update(ctx, gw, cur, nil); err != nil {
		t.Fatal(err)
	}
	got, err := client.CoreV1().Secrets(testNamespace).Get(ctx, s.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Data["x-extra"]) != "kept" || got.Labels["team"] != "platform" || got.Annotations["backup.example/policy"] != "daily" {
		t.Errorf("the update lost what the gateway does not model: data %q, labels %v, annotations %v", got.Data["x-extra"], got.Labels, got.Annotations)
	}
	if !strings.Contains(string(got.Data[KeyLabels]), "staging") || len(got.Data[KeyPrivateKey]) == 0 {
		t.Errorf("the update was not written, or lost the material: labels %q", got.Data[KeyLabels])
	}
}

// startStore runs store until the test ends and waits for its first lists.
func startStore(t *testing.T, store *Store) {
	t.Helper()
	startStoreExcept(t, store, "")
}

// startStoreExcept is startStore, but does not wait for the credential
// Secrets of namespace unlisted.
func startStoreExcept(t *testing.T, store *Store, unlisted string) {
	t.Helper()
	testgateways.Run(t, store.Run, "the store to sync", func() bool {
		if !store.HasSynced() {
			return false
		}
		for ns, inf := range store.sources.byNamespace {
			if ns != unlisted && !inf.HasSynced() {
				return false
			}
		}
		return true
	})
}
