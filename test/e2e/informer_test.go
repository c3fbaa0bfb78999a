package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/generated/clientset/versioned"
	"github.com/clustergateway/cluster-gateway/pkg/generated/informers/externalversions"
)

// informerEvent is one event a handler saw, for the test's gateway only.
type informerEvent struct {
	kind string // add, update, delete
	gw   *gatewayv1alpha1.ClusterGateway
}

// TestInformerEvents: an informer of the generated informer factory, against
// the hub, syncs (listing localenv's gateways) and then sees the add, update
// and delete of a gateway written with the generated clientset. What it
// receives never holds credential material.
func TestInformerEvents(t *testing.T) {
	requireGateway(t)
	t.Parallel()
	cs, err := versioned.NewForConfig(hubConfigFrom(t, env.Hub.Kubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	name := uniqueName(t, "e2e-informer")
	creds := newTestCreds(t, name)
	cleanupGateway(t, name)

	ctx, cancel := context.WithCancel(context.Background())
	factory := externalversions.NewSharedInformerFactory(cs, 0)
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	inf := factory.Gateway().V1alpha1().ClusterGateways()

	events := make(chan informerEvent, 100)
	var leaked sync.Once
	record := func(kind string, obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		gw, ok := obj.(*gatewayv1alpha1.ClusterGateway)
		if !ok {
			t.Errorf("%s event with %T", kind, obj)
			return
		}
		if gw.Spec.Credential.X509 != nil || gw.Spec.Credential.BearerToken != "" {
			leaked.Do(func() { t.Errorf("%s event of %s carries credential material", kind, gw.Name) })
		}
		if gw.Name == name {
			events <- informerEvent{kind, gw}
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { record("add", obj) },
		UpdateFunc: func(_, obj any) { record("update", obj) },
		DeleteFunc: func(obj any) { record("delete", obj) },
	}); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	syncCtx, syncCancel := context.WithTimeout(ctx, pollTimeout)
	defer syncCancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), inf.Informer().HasSynced) {
		t.Fatalf("the informer did not sync within %s", pollTimeout)
	}
	for _, m := range env.Managed {
		gw, err := inf.Lister().Get(m.GatewayName)
		if err != nil {
			t.Errorf("lister after sync: %v", err)
			continue
		}
		if c := readyCondition(gw); c == nil || c.Status != metav1.ConditionTrue || gw.Spec.Endpoint.Address != m.URL {
			t.Errorf("lister: %s = %s, Ready %+v", m.GatewayName, gw.Spec.Endpoint.Address, c)
		}
	}

	// next waits for the next event of our gateway that matches.
	next := func(kind string, match func(*gatewayv1alpha1.ClusterGateway) bool) *gatewayv1alpha1.ClusterGateway {
		t.Helper()
		timeout := time.After(pollTimeout)
		for {
			select {
			case ev := <-events:
				if ev.kind == kind && match(ev.gw) {
					return ev.gw
				}
				t.Logf("informer: %s event of %s at resourceVersion %s (waiting for %s)", ev.kind, name, ev.gw.ResourceVersion, kind)
			case <-timeout:
				t.Fatalf("the informer had no %s event of %s within %s", kind, name, pollTimeout)
			}
		}
	}
	anyEvent := func(*gatewayv1alpha1.ClusterGateway) bool { return true }

	client := cs.GatewayV1alpha1().ClusterGateways()
	created, err := client.Create(ctx, x509Gateway(name, "https://127.0.0.9:6443", creds), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	added := next("add", anyEvent)
	if added.UID != created.UID || added.Status.Credential == nil || added.Status.Credential.Subject != creds.Subject {
		t.Errorf("added object: uid %s (created %s), status.credential %+v", added.UID, created.UID, added.Status.Credential)
	}

	// Update the object as returned (material redacted): it is kept.
	created.Labels = map[string]string{"informer": "updated"}
	updated, err := client.Update(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	got := next("update", func(gw *gatewayv1alpha1.ClusterGateway) bool { return gw.ResourceVersion == updated.ResourceVersion })
	if got.Labels["informer"] != "updated" {
		t.Errorf("updated object: labels %v", got.Labels)
	}
	if c := readyCondition(got); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("updated object: Ready %+v, want True (the update without material kept it)", c)
	}
	if s := mustSecret(t, name); string(s.Data["tls.key"]) != string(creds.KeyPEM) {
		t.Errorf("the update lost the stored private key")
	}
	eventually(t, "the lister has the update", func() error {
		gw, err := inf.Lister().Get(name)
		if err != nil {
			return err
		}
		if gw.ResourceVersion != updated.ResourceVersion {
			return &resourceVersionError{gw.ResourceVersion, updated.ResourceVersion}
		}
		return nil
	})

	if err := client.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	next("delete", anyEvent)
	if _, err := inf.Lister().Get(name); err == nil {
		t.Errorf("the lister still has %s after its delete event", name)
	}
}

// TestInformerWatchList: the streaming list that client-go informers use by
// default (sendInitialEvents=true, resourceVersionMatch=NotOlderThan, no
// resourceVersion) passes through to the hub: every gateway arrives as ADDED,
// then a bookmark marks the end of the initial events. A plain watch with no
// resourceVersion (which the server defaults to the same) works too.
func TestInformerWatchList(t *testing.T) {
	requireGateway(t)
	t.Parallel()
	client := gatewayClient(t, env.Hub.Kubeconfig).GatewayV1alpha1().ClusterGateways()
	sendInitialEvents := true
	for _, tc := range []struct {
		name string
		opts metav1.ListOptions
	}{
		{"watch-list", metav1.ListOptions{SendInitialEvents: &sendInitialEvents, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true}},
		{"plain watch", metav1.ListOptions{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), pollTimeout)
			defer cancel()
			w, err := client.Watch(ctx, tc.opts)
			if err != nil {
				t.Fatalf("watch: %v", err)
			}
			defer w.Stop()
			seen := map[string]bool{}
			allSeen := func() bool {
				for _, m := range env.Managed {
					if !seen[m.GatewayName] {
						return false
					}
				}
				return true
			}
			for ev := range w.ResultChan() {
				switch ev.Type {
				case watch.Added:
					gw := ev.Object.(*gatewayv1alpha1.ClusterGateway)
					if gw.Spec.Credential.X509 != nil || gw.Spec.Credential.BearerToken != "" {
						t.Errorf("ADDED %s carries credential material", gw.Name)
					}
					seen[gw.Name] = true
					if tc.opts.SendInitialEvents == nil && allSeen() {
						return
					}
				case watch.Bookmark:
					gw := ev.Object.(*gatewayv1alpha1.ClusterGateway)
					if gw.Annotations[metav1.InitialEventsAnnotationKey] != "true" {
						continue
					}
					if !allSeen() {
						t.Errorf("initial events ended without all of localenv's gateways: saw %v", seen)
					}
					if gw.ResourceVersion == "" {
						t.Errorf("the initial-events-end bookmark has no resourceVersion")
					}
					return
				case watch.Error:
					t.Fatalf("watch error: %v", ev.Object)
				}
			}
			t.Fatalf("the watch ended before the initial events did (saw %v): %v", seen, ctx.Err())
		})
	}
}

type resourceVersionError struct{ got, want string }

func (e *resourceVersionError) Error() string {
	return "resourceVersion " + e.got + ", want " + e.want
}
