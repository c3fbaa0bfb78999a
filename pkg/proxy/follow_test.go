package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/clustergateway/cluster-gateway/internal/testpoll"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
	"github.com/clustergateway/cluster-gateway/pkg/pool"
)

// The proxy follows the store by construction: a deleted gateway's pooled
// transport is retired at once, so is one whose transport changes, and a
// new token alone keeps it.
func TestProxyFollowsTheStore(t *testing.T) {
	up := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	other := newTLSUpstream(t, http.NotFoundHandler())
	sec := tokenSecret("c", up.URL, upstreamCA(up), "t1", "None")
	client := fake.NewClientset(sec)
	store := runStore(t, fixtureNamespace, client)
	pl := newTestPool(t, 4, 2*time.Second, nil)
	px, err := newWired(t, store, Config{Pool: pl, Authorizer: authorizerfactory.NewAlwaysAllowAuthorizer()})
	if err != nil {
		t.Fatal(err)
	}

	get := func() {
		t.Helper()
		if rec := serveAs(px, "c", "/api", alice, httptest.NewRequest(http.MethodGet, "/x", nil)); rec.Code != http.StatusOK {
			t.Fatalf("request: %d %s", rec.Code, rec.Body)
		}
	}
	update := func(rv string, mutate func(d map[string][]byte)) {
		t.Helper()
		s := sec.DeepCopy()
		s.ResourceVersion = rv
		mutate(s.Data)
		if _, err := client.CoreV1().Secrets(fixtureNamespace).Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		sec = s
		testpoll.EventuallyTrue(t, 30*time.Second, "the store to see resourceVersion "+rv, func() bool {
			g, err := store.Get("c")
			return err == nil && g.Object.ResourceVersion == rv
		})
	}
	retired := func(reason string) int64 { return pl.Stats().Retired[reason] }

	get()
	update("2", func(d map[string][]byte) { d[gateways.KeyToken] = []byte("t2") })
	get()
	if s := pl.Stats(); s.Created != 1 || s.Live != 1 || retired(pool.ReasonRotated) != 0 {
		t.Fatalf("a new token: %+v; want the same entry", s)
	}
	update("3", func(d map[string][]byte) { d[gateways.KeyCABundle] = append(upstreamCA(up), upstreamCA(other)...) })
	testpoll.EventuallyTrue(t, 30*time.Second, "the rotated entry to be retired without a request", func() bool { return retired(pool.ReasonRotated) == 1 && pl.Stats().Live == 0 })
	get()
	if err := client.CoreV1().Secrets(fixtureNamespace).Delete(context.Background(), "c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testpoll.EventuallyTrue(t, 30*time.Second, "the deleted gateway's entry to be retired", func() bool { return retired(pool.ReasonDeleted) == 1 && pl.Stats().Live == 0 })
}
