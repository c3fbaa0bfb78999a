package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

const (
	// poolGrace is long next to how long a ConfigMap's event takes to reach a
	// watch through the gateway, even on a loaded machine: the watch on a
	// retired entry must deliver one created half way through it.
	poolGrace    = 8 * time.Second
	poolCapacity = 3
)

// TestProxyPool drives the gateway's transport pool through the real hub and
// reads what happened from the gateway's own /metrics: one entry for many
// requests, rotation retires the old entry while its watch goes on until the
// grace period, capacity bounds the live entries, deletion retires, and at the
// end connections, goroutines and descriptors are back where they started.
// It restarts the gateway with a small capacity and grace, so it does not run
// in parallel with other tests.
func TestProxyPool(t *testing.T) {
	requireGateway(t)
	ctx := context.Background()
	args := append(append([]string{}, env.GatewayArgs...),
		fmt.Sprintf("--retire-grace-period=%s", poolGrace), fmt.Sprintf("--pool-capacity=%d", poolCapacity))
	restartGateway(t, args)
	t.Cleanup(func() { restartGateway(t, nil) })

	const (
		created  = "cluster_gateway_pool_entry_creations_total"
		live     = "cluster_gateway_pool_entries"
		retiring = "cluster_gateway_pool_retiring_entries"
		streams  = "cluster_gateway_pool_active_streams"
		conns    = "cluster_gateway_pool_open_connections"
	)
	retired := func(reason string) string {
		return fmt.Sprintf(`cluster_gateway_pool_entry_retirements_total{reason=%q}`, reason)
	}
	base := gatewayMetrics(t)

	// 1,000 requests to one cluster: one entry.
	a := directGateway(uniqueName(t, "pool-a"), 1)
	createGateway(t, a)
	path := "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/" + a.Name + "/proxy/api/v1/namespaces/default"
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for w := 0; w < 10; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				if code, body, err := hubDo(path); err != nil || code != 200 {
					errs <- fmt.Errorf("%d %s %v", code, body, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("request through the gateway: %v", err)
	}
	m := gatewayMetrics(t)
	if got := m[created] - base[created]; got != 1 {
		t.Fatalf("1,000 requests to one cluster created %v pool entries, want 1", got)
	}
	if got := m[`cluster_gateway_proxy_requests_total{code="200",kind="request"}`] - base[`cluster_gateway_proxy_requests_total{code="200",kind="request"}`]; got < 1000 {
		t.Fatalf("proxy_requests_total{code=200} grew by %v, want at least 1000", got)
	}

	// A watch on the entry, then a certificate rotation.
	_, viaA := viaHub(t, a.Name)
	direct := managedClient(t, 1)
	ns := uniqueName(t, "pool")
	if _, err := direct.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = direct.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) })
	w, err := viaA.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watch through the gateway: %v", err)
	}
	defer w.Stop()
	expectAdded(t, w, direct, ns, "before-rotation")

	rotateAt := time.Now() // the old entry cannot be retired before this
	rotateCertificate(t, a.Name, 1)
	if _, err := viaA.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("request after rotation: %v", err)
	}
	m = gatewayMetrics(t)
	if got := m[created] - base[created]; got != 2 {
		t.Fatalf("after rotating the certificate: %v entries created in all, want 2", got)
	}
	if got := m[retired("rotated")] - base[retired("rotated")]; got != 1 {
		t.Fatalf("after rotating the certificate: %v entries retired as rotated, want 1", got)
	}
	if m[retiring] < 1 {
		t.Fatalf("the rotated entry is not retiring while its watch is open (retiring_entries = %v)", m[retiring])
	}
	retiredBy := time.Now() // the metrics say it is retiring
	// The watch on the old entry still delivers half way through the grace
	// period, then is closed, cleanly, once it is over; a new watch works.
	startGraceCheck(t, w, direct, ns, "after-rotation", rotateAt, retiredBy, poolGrace).wait(t)
	w2, err := viaA.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("re-watch after the grace period: %v", err)
	}
	expectAdded(t, w2, direct, ns, "re-watch")
	w2.Stop()

	// Three times the capacity of distinct clusters: never more than the
	// capacity live, the rest evicted.
	before := gatewayMetrics(t)
	var names []string
	for i := 0; i < 3*poolCapacity; i++ {
		g := directGateway(uniqueName(t, fmt.Sprintf("pool-%d", i)), i%2)
		createGateway(t, g)
		names = append(names, g.Name)
		if code, body := hubGet(t, "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/"+g.Name+"/proxy/version"); code != 200 {
			t.Fatalf("request to %s: %d %s", g.Name, code, body)
		}
		if n := gatewayMetrics(t)[live]; n > poolCapacity {
			t.Fatalf("%d clusters used: %v live pool entries, want at most the capacity %d", i+1, n, poolCapacity)
		}
	}
	m = gatewayMetrics(t)
	if got := m[retired("evicted")] - before[retired("evicted")]; got < 2*poolCapacity {
		t.Fatalf("%d clusters through a pool of %d: %v evictions, want at least %d", 3*poolCapacity, poolCapacity, got, 2*poolCapacity)
	}

	// Deleting a gateway retires its entry.
	gc := gatewayClient(t, env.Hub.Kubeconfig)
	last := names[len(names)-1]
	if err := gc.GatewayV1alpha1().ClusterGateways().Delete(ctx, last, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleted gateway's entry is retired", func() error {
		if got := gatewayMetrics(t)[retired("deleted")] - before[retired("deleted")]; got < 1 {
			return fmt.Errorf("%v entries retired as deleted", got)
		}
		return nil
	})

	// Everything back: delete the rest and wait for the pool to empty.
	for _, n := range append(names[:len(names)-1], a.Name) {
		_ = gc.GatewayV1alpha1().ClusterGateways().Delete(ctx, n, metav1.DeleteOptions{})
	}
	eventually(t, "the pool returns to empty", func() error {
		m := gatewayMetrics(t)
		if m[live] != 0 || m[retiring] != 0 || m[streams] != 0 || m[conns] != 0 {
			return fmt.Errorf("entries %v, retiring %v, active streams %v, open connections %v", m[live], m[retiring], m[streams], m[conns])
		}
		return nil
	})
	awaitGatewayBaseline(t, base)
}

// restartGateway restarts the gateway with args (nil: the environment's).
func restartGateway(t *testing.T, args []string) {
	t.Helper()
	if err := env.StopGateway(); err != nil {
		t.Fatalf("stop the gateway: %v", err)
	}
	if err := env.StartGateway(context.Background(), args); err != nil {
		t.Fatalf("start the gateway with %v: %v", args, err)
	}
}

// rotateCertificate gives gateway name a fresh client certificate for the
// same user, signed by managed cluster i's CA.
func rotateCertificate(t *testing.T, name string, i int) {
	t.Helper()
	cred := newClientCert(t, env.Managed[i].CA)
	gc := gatewayClient(t, env.Hub.Kubeconfig)
	gw, err := gc.GatewayV1alpha1().ClusterGateways().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gw.Spec.Credential = gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialX509Certificate, X509: cred}
	if _, err := gc.GatewayV1alpha1().ClusterGateways().Update(context.Background(), gw, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("rotate the certificate of %s: %v", name, err)
	}
}
