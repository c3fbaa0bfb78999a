package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
	"github.com/clustergateway/cluster-gateway/internal/testmetrics"
	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/generated/clientset/versioned"
)

// haArgs are the replicas' flags: a short shutdown delay, as a Deployment's
// readiness probe period would be, and a short drain of exec streams.
func haArgs() []string {
	return append(slices.Clone(gatewayArgs), "--shutdown-delay-duration=2s", "--shutdown-stream-drain=2s")
}

// replicaClient is a ClusterGateway client straight to one replica's port, as the hub admin.
func replicaClient(t *testing.T, g *localenv.Gateway) versioned.Interface {
	t.Helper()
	cfg := &rest.Config{Host: g.URL, TLSClientConfig: rest.TLSClientConfig{
		CAData: g.CA.CertPEM, CertData: env.Hub.Admin.CertPEM, KeyData: env.Hub.Admin.KeyPEM,
	}}
	c, err := versioned.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestHATwoReplicas runs a second gateway replica beside the environment's,
// behind a balancer that routes the hub's connections to ready replicas (as
// a Service does). Reads without a resourceVersion are consistent across
// replicas; a rolling restart of both under steady client load fails no
// ordinary request of a client that retries as client-go does, and ends
// watches cleanly (no error event, no decode error). It restarts the gateway
// and re-points the APIService, so it does not run in parallel.
func TestHATwoReplicas(t *testing.T) {
	requireGateway(t)
	ctx := context.Background()
	restartGateway(t, haArgs())
	t.Cleanup(func() { restartGateway(t, nil) })
	a := env.Gateway
	b, err := env.StartReplica(ctx, "cluster-gateway-b", haArgs())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(env.GatewayLogs(), b.Process.LogPath) {
		t.Fatalf("the replica's log %s is not among the gateway logs the suite scans for data races: %q", b.Process.LogPath, env.GatewayLogs())
	}
	t.Cleanup(func() { _ = env.StopReplica(b, 10*time.Second) })
	lb, err := env.StartBalancer(a, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lb.Close)
	if err := env.PointAPIService(ctx, lb.Port); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.PointAPIService(context.Background(), env.Gateway.Port); err != nil {
			t.Errorf("point the APIService back at the gateway: %v", err)
		}
	})

	t.Run("reads are consistent across replicas", func(t *testing.T) {
		ca, cb := replicaClient(t, a).GatewayV1alpha1().ClusterGateways(), replicaClient(t, b).GatewayV1alpha1().ClusterGateways()
		for i := range 15 {
			name := uniqueName(t, fmt.Sprintf("ha-%d", i))
			write, read := ca, cb
			if i%2 == 1 {
				write, read = cb, ca
			}
			if _, err := write.Create(ctx, directGateway(name, 0), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := read.Get(ctx, name, metav1.GetOptions{}); err != nil {
				t.Fatalf("round %d: a get on the other replica right after the create: %v", i, err)
			}
			list, err := read.List(ctx, metav1.ListOptions{})
			if err != nil || !slices.ContainsFunc(list.Items, func(g gatewayv1alpha1.ClusterGateway) bool { return g.Name == name }) {
				t.Fatalf("round %d: a list on the other replica right after the create misses %s (err %v)", i, name, err)
			}
			if err := read.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatalf("round %d: delete on the other replica right after the create: %v", i, err)
			}
			if _, err := write.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Fatalf("round %d: a get on the first replica right after the delete on the other: %v, want NotFound", i, err)
			}
		}
		// The mechanism, as the hub saw it: a get without a resourceVersion
		// reads the Secret from the hub, one with resourceVersion "0" does not.
		name := uniqueName(t, "ha-reads")
		if _, err := ca.Create(ctx, directGateway(name, 0), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ca.Delete(context.Background(), name, metav1.DeleteOptions{}) })
		before := hubSecretGets(t)
		for range 10 {
			if _, err := cb.Get(ctx, name, metav1.GetOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		fresh := hubSecretGets(t) - before
		for range 10 {
			if _, err := cb.Get(ctx, name, metav1.GetOptions{ResourceVersion: "0"}); err != nil {
				t.Fatal(err)
			}
		}
		cached := hubSecretGets(t) - before - fresh
		if fresh < 10 || cached != 0 {
			t.Fatalf("the hub served %v Secret GETs for 10 gets without a resourceVersion (want 10 or more) and %v for 10 with resourceVersion 0 (want none)", fresh, cached)
		}

		// A Secret written straight to the hub (as a GitOps tool does), read
		// at once through a replica that did not write it and so waited for
		// nothing: its cache may not have it yet, the read must.
		secrets := hubAdmin(t).CoreV1().Secrets(localenv.GatewayNamespace)
		for i := range 15 {
			name := uniqueName(t, fmt.Sprintf("ha-secret-%d", i))
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{gatewayLabel: "true"}},
				StringData: map[string]string{"endpoint": "https://127.0.0.9:6443", "credential-type": "BearerToken", "token": "t", "insecure-skip-tls-verify": "true"}}
			if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			_, getErr := cb.Get(ctx, name, metav1.GetOptions{})
			list, listErr := ca.List(ctx, metav1.ListOptions{})
			if err := secrets.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			if getErr != nil {
				t.Fatalf("round %d: a get right after the Secret was written: %v", i, getErr)
			}
			if listErr != nil || !slices.ContainsFunc(list.Items, func(g gatewayv1alpha1.ClusterGateway) bool { return g.Name == name }) {
				t.Fatalf("round %d: a list right after the Secret was written misses it (err %v)", i, listErr)
			}
		}
	})

	t.Run("rolling restart under load", func(t *testing.T) {
		_, cs := viaHub(t, env.Managed[0].GatewayName)
		var requests, failures atomic.Int64
		var mu sync.Mutex
		var failed []string
		loadCtx, stopLoad := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for loadCtx.Err() == nil {
					_, err := cs.CoreV1().Namespaces().Get(loadCtx, "default", metav1.GetOptions{})
					if loadCtx.Err() != nil {
						return
					}
					requests.Add(1)
					if err != nil {
						failures.Add(1)
						mu.Lock()
						failed = append(failed, err.Error())
						mu.Unlock()
					}
				}
			})
		}
		// Watches through the hub, re-made whenever one ends: each must end
		// cleanly, never with an error event.
		var watchEnds, watchErrors atomic.Int64
		wg.Go(func() {
			for loadCtx.Err() == nil {
				w, err := cs.CoreV1().ConfigMaps("default").Watch(loadCtx, metav1.ListOptions{})
				if err != nil {
					continue // retried: a new watch during a restart may be refused
				}
				for ev := range w.ResultChan() {
					// Stopping the load cancels the watch: client-go reports that as an error event too.
					if ev.Type == watch.Error && loadCtx.Err() == nil {
						watchErrors.Add(1)
						mu.Lock()
						failed = append(failed, fmt.Sprintf("watch error event: %v", ev.Object))
						mu.Unlock()
					}
				}
				if loadCtx.Err() == nil {
					watchEnds.Add(1)
				}
			}
		})
		waitN := func(n int64) {
			eventually(t, fmt.Sprintf("%d requests", n), func() error {
				if got := requests.Load(); got < n {
					return fmt.Errorf("%d requests so far", got)
				}
				return nil
			})
		}
		waitN(50)
		for _, r := range []struct {
			g    *localenv.Gateway
			name string
		}{{a, "cluster-gateway"}, {b, "cluster-gateway-b"}} {
			before := requests.Load()
			if err := env.RestartReplica(ctx, r.g, r.name, 30*time.Second); err != nil {
				t.Fatalf("restart %s: %v", r.name, err)
			}
			waitN(before + 50)
		}
		stopLoad()
		wg.Wait()
		t.Logf("%d requests through the rolling restart, %d failed; %d watches ended and were re-made", requests.Load(), failures.Load(), watchEnds.Load())
		if failures.Load() != 0 || watchErrors.Load() != 0 {
			t.Fatalf("failures during the rolling restart: %q", failed)
		}
		if watchEnds.Load() == 0 {
			t.Fatal("no watch ended during the rolling restart: the watches were not on the restarted replicas, and the test proves nothing about them")
		}
	})
}

// hubSecretGets is the hub's count of GETs of single Secrets that it served.
func hubSecretGets(t *testing.T) float64 {
	t.Helper()
	code, body := hubGet(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("hub /metrics: %d", code)
	}
	m, err := testmetrics.Parse(strings.NewReader(body))
	if err != nil {
		t.Fatalf("hub /metrics: %v", err)
	}
	var n float64
	for k, v := range m {
		if strings.HasPrefix(k, "apiserver_request_total{") && strings.Contains(k, `resource="secrets"`) &&
			strings.Contains(k, `scope="resource"`) && strings.Contains(k, `verb="GET"`) {
			n += v
		}
	}
	return n
}
