package proxy

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/clustergateway/cluster-gateway/pkg/gateways"
	"github.com/clustergateway/cluster-gateway/pkg/pool"
)

// A request that read its gateway before the gateway was deleted and
// reaches the pool after the deletion retired the gateway's entry does not
// leave a new entry behind: it gets its lease, on an entry that is retired
// at once (seen in e2e: 200 gateways deleted under traffic left some).
func TestNoEntryLeftForADeletedGateway(t *testing.T) {
	up := newCapture(t)
	client := fake.NewClientset(tokenSecret("c", up.srv.URL, upstreamCA(up.srv), "t", "None"))
	store := runStore(t, fixtureNamespace, client)
	pl := newTestPool(t, 4, 2*time.Second, nil)
	px, err := New(Options{Store: store, Pool: pl, Authorizer: authorizerfactory.NewAlwaysAllowAuthorizer()})
	if err != nil {
		t.Fatal(err)
	}
	var stale *gateways.Gateway
	for stale == nil {
		stale, _ = store.Get("c")
		time.Sleep(5 * time.Millisecond)
	}
	target, err := px.target(stale)
	if err != nil {
		t.Fatal(err)
	}

	if err := client.CoreV1().Secrets(fixtureNamespace).Delete(context.Background(), "c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := store.Get("c"); apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the store did not see the deletion")
		}
	}
	lease := new(pool.Lease)
	if err := px.acquire(lease, target); err != nil {
		t.Fatalf("a request that started before the deletion: %v", err)
	}
	if lease.Transport() == nil {
		t.Fatal("no transport on the lease")
	}
	lease.Release()
	if n := pl.Len(); n != 0 {
		t.Fatalf("%d live pool entries after a request to a deleted gateway, want 0", n)
	}
}
