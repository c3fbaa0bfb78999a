package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
)

const (
	loadGateways = 200
	loadRequests = 1000
	// Of the requests: watches and execs; the rest alternate gets and lists.
	loadWatches = 90
	loadExecs   = 10
)

// TestManyGatewaysMixedLoad registers 200 ClusterGateways at once (as
// Secrets on the hub, the way a GitOps tool would; they point at the
// environment's two direct clusters) and sends 1,000 requests through the
// hub at the same moment, spread over all 200: gets and lists, watches
// (each reads its first event, then stops) and WebSocket execs. Every one
// succeeds (client-go's retries of a 429 included). After the gateways are
// deleted, the gateway is back at its baseline: pool entries, open pooled
// connections and active streams (its /metrics), and its goroutines and
// open file descriptors (from /proc). It measures the gateway's resources
// against a baseline, so it is not parallel.
func TestManyGatewaysMixedLoad(t *testing.T) {
	requireGateway(t)
	ctx := context.Background()
	const (
		entries = "cluster_gateway_pool_entries"
		conns   = "cluster_gateway_pool_open_connections"
		streams = "cluster_gateway_pool_active_streams"
	)
	pid := env.Gateway.Process.Pid()
	base := gatewayMetrics(t)
	baseFDs := openFDsOf(t, pid)
	began := time.Now()

	// 200 gateway Secrets, created straight on the hub.
	run := uniqueName(t, "load")
	hub := hubAdmin(t)
	secrets := hub.CoreV1().Secrets(secretNamespace)
	t.Cleanup(func() {
		_ = secrets.DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "e2e-load=" + run})
	})
	names := make([]string, loadGateways)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%03d", run, i)
	}
	labels, _ := json.Marshal(map[string]string{"e2e-load": run})
	if err := parallel(16, loadGateways, func(i int) error {
		m := env.Managed[i%2]
		_, err := secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: names[i], Labels: map[string]string{gatewayLabel: "true", "e2e-load": run}},
			Data: map[string][]byte{
				"endpoint": []byte(m.URL), "ca.crt": m.CA.CertPEM, "credential-type": []byte("X509Certificate"),
				"tls.crt": m.GatewayUser.CertPEM, "tls.key": m.GatewayUser.KeyPEM, "labels": labels,
			},
		}, metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatalf("create the gateway Secrets: %v", err)
	}
	direct := gatewayDirect(t).GatewayV1alpha1().ClusterGateways()
	eventually(t, "the gateway's cache has the 200 gateways", func() error {
		l, err := direct.List(ctx, metav1.ListOptions{LabelSelector: "e2e-load=" + run})
		if err != nil {
			return err
		}
		if len(l.Items) != loadGateways {
			return fmt.Errorf("%d of %d", len(l.Items), loadGateways)
		}
		return nil
	})
	t.Logf("200 gateways created and in the gateway's cache in %s", time.Since(began).Round(100*time.Millisecond))

	clients := make([]kubernetes.Interface, loadGateways)
	configs := make([]*rest.Config, loadGateways)
	for i, n := range names {
		configs[i], clients[i] = viaHub(t, n)
	}

	// 1,000 requests, released together.
	type result struct {
		kind string
		took time.Duration
		err  error
	}
	results := make(chan result, loadRequests)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range loadRequests {
		g := i % loadGateways
		kind := "get"
		switch {
		case i < loadExecs:
			kind = "exec"
		case i < loadExecs+loadWatches:
			kind = "watch"
		case i%2 == 1:
			kind = "list"
		}
		wg.Go(func() {
			<-start
			t0 := time.Now()
			err := loadRequest(ctx, kind, clients[g], configs[g], env.Managed[g%2].Name)
			results <- result{kind, time.Since(t0), err}
		})
	}
	loadAt := time.Now()
	close(start)
	wg.Wait()
	close(results)
	loadTook := time.Since(loadAt)
	byKind := map[string][]time.Duration{}
	failed := 0
	for r := range results {
		if r.err != nil {
			failed++
			if failed <= 10 {
				t.Errorf("%s: %v", r.kind, r.err)
			}
		}
		byKind[r.kind] = append(byKind[r.kind], r.took)
	}
	if failed > 0 {
		t.Fatalf("%d of %d requests failed", failed, loadRequests)
	}
	var figures []string
	for _, k := range []string{"get", "list", "watch", "exec"} {
		d := byKind[k]
		slices.Sort(d)
		figures = append(figures, fmt.Sprintf("%s %d (p50 %s, max %s)", k, len(d), d[len(d)/2].Round(time.Millisecond), d[len(d)-1].Round(time.Millisecond)))
	}
	peak := gatewayMetrics(t)
	t.Logf("1,000 concurrent requests over 200 gateways in %s: %s; the gateway answered 429 %v times (client-go retried); then %v pool entries, %v open connections, %v goroutines",
		loadTook.Round(10*time.Millisecond), strings.Join(figures, ", "), tooMany(peak)-tooMany(base), peak[entries], peak[conns], peak["go_goroutines"])

	// Delete the 200 gateways; the gateway returns to its baseline.
	deleted := time.Now()
	if err := secrets.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "e2e-load=" + run}); err != nil {
		t.Fatalf("delete the gateway Secrets: %v", err)
	}
	eventually(t, "the gateway's pool, goroutines and fds return to their baseline", func() error {
		m := gatewayMetrics(t)
		fds := openFDsOf(t, pid)
		var above []string
		if m[entries] > base[entries] || m[conns] > base[conns] || m[streams] > base[streams] {
			above = append(above, fmt.Sprintf("pool entries %v, open connections %v, active streams %v (baseline %v, %v, %v)",
				m[entries], m[conns], m[streams], base[entries], base[conns], base[streams]))
		}
		if g := m["go_goroutines"]; g > base["go_goroutines"]+15 {
			above = append(above, fmt.Sprintf("goroutines %v (baseline %v)", g, base["go_goroutines"]))
		}
		if fds > baseFDs+5 {
			above = append(above, fmt.Sprintf("open fds %d (baseline %d)", fds, baseFDs))
		}
		if len(above) > 0 {
			return fmt.Errorf("%s", strings.Join(above, "; "))
		}
		return nil
	})
	t.Logf("back at the baseline %s after the deletion; the whole test took %s", time.Since(deleted).Round(100*time.Millisecond), time.Since(began).Round(100*time.Millisecond))
}

// loadRequest is one request of the mixed load, through the hub.
func loadRequest(ctx context.Context, kind string, cs kubernetes.Interface, cfg *rest.Config, cluster string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	switch kind {
	case "get":
		_, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return err
	case "list":
		_, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		return err
	case "watch":
		w, err := cs.CoreV1().Namespaces().Watch(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("metadata.name", "default").String(), ResourceVersion: "0",
		})
		if err != nil {
			return err
		}
		defer w.Stop()
		select {
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type != watch.Added {
				return fmt.Errorf("watch: first event %v (open %v), want ADDED", ev.Type, ok)
			}
			return nil
		case <-ctx.Done():
			return fmt.Errorf("watch: no event: %w", ctx.Err())
		}
	case "exec":
		u := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name("demo").SubResource("exec").
			VersionedParams(&corev1.PodExecOptions{Container: "main", Command: []string{"hostname"}, Stdout: true}, scheme.ParameterCodec).URL()
		ex, err := remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
		if err != nil {
			return err
		}
		var out bytes.Buffer
		if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out}); err != nil {
			return fmt.Errorf("exec: %w", err)
		}
		if got := strings.TrimSpace(out.String()); got != cluster {
			return fmt.Errorf("exec hostname: %q, want %q", got, cluster)
		}
		return nil
	}
	return fmt.Errorf("unknown kind %q", kind)
}

// parallel runs f(0..n-1) on workers goroutines and returns the first error.
func parallel(workers, n int, f func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  = make(chan int)
	)
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

// tooMany is how many requests the gateway's server answered 429.
func tooMany(m map[string]float64) float64 {
	n := 0.0
	for k, v := range m {
		if strings.HasPrefix(k, "apiserver_request_total{") && strings.Contains(k, `code="429"`) {
			n += v
		}
	}
	return n
}
