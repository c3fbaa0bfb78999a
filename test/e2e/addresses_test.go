package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
	"github.com/clustergateway/cluster-gateway/internal/testmetrics"
	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// The two kube-apiservers of TestSeveralAddresses: replicas of managed-1
// (its etcd prefix and CA) on addresses of their own, so that killing one
// leaves the suite's clusters alone.
var replicaIPs = [2]string{"127.0.0.241", "127.0.0.242"}

// TestSeveralAddresses: a ClusterGateway naming two kube-apiservers of one
// cluster spreads requests over both; when the one holding a client-go
// informer's watch is killed, the watch ends and the informer resumes it
// on the other (it sees an object created after the kill); of the GETs sent
// one after the other meanwhile, only one in flight during the kill may
// fail, with docs/api.md's 503 without Retry-After, and every GET started
// once the server is dead succeeds; the status shows that address
// unreachable while the cluster stays Reachable; once it is back, requests
// go to it again.
func TestSeveralAddresses(t *testing.T) {
	requireGateway(t)
	ctx := context.Background()
	var servers [2]*localenv.Cluster
	for i, ip := range replicaIPs {
		r, err := env.StartAPIServerReplica(ctx, env.Managed[0], ip)
		if err != nil {
			t.Fatal(err)
		}
		servers[i] = r
		t.Cleanup(func() { _ = env.StopCluster(r) })
	}
	name := uniqueName(t, "e2e-addresses")
	gw := directGateway(name, 0)
	gw.Spec.Endpoint.Address = servers[0].URL
	gw.Spec.Endpoint.AdditionalAddresses = []string{servers[1].URL}
	createGateway(t, gw)
	awaitAddresses(t, name, true, true)

	direct := managedClient(t, 0) // the suite's managed-1 server: not counted below
	ns := uniqueName(t, "e2e-addresses")
	if _, err := direct.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = direct.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	createConfigMap(t, direct, ns, "before")
	_, hub := viaHub(t, name)

	// An informer through the hub, recording the names it sees added.
	seen := make(chan string, 100)
	ictx, stop := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(hub, 0, informers.WithNamespace(ns))
	t.Cleanup(func() { stop(); factory.Shutdown() })
	inf := factory.Core().V1().ConfigMaps().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		seen <- obj.(*corev1.ConfigMap).Name
	}}); err != nil {
		t.Fatal(err)
	}
	factory.Start(ictx.Done())
	if !cache.WaitForCacheSync(ictx.Done(), inf.HasSynced) {
		t.Fatal("the informer did not sync through the hub")
	}
	awaitSeen(t, seen, "before")

	// Both servers serve: 20 GETs, one after the other, are spread.
	before := [2]float64{configMapGets(t, servers[0]), configMapGets(t, servers[1])}
	for range 20 {
		if _, err := hub.CoreV1().ConfigMaps(ns).Get(ctx, "before", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range servers {
		if n := configMapGets(t, s) - before[i]; n < 5 {
			t.Fatalf("%s served %v of 20 GETs; want them spread over both servers", s.Name, n)
		}
	}

	// Kill the server holding the informer's watch while GETs run.
	var victim int
	eventually(t, "one server to hold the informer's watch", func() error {
		for i, s := range servers {
			if configMapWatches(t, s) > 0 {
				victim = i
				return nil
			}
		}
		return fmt.Errorf("no server has a watch of configmaps")
	})
	var (
		gets    atomic.Int64
		mu      sync.Mutex
		results []timedGET // every GET of the loop, in order
		done    = make(chan struct{})
		loop    sync.WaitGroup
	)
	// Raw GETs through the hub: client-go would send a 503 with
	// Retry-After again, and hide what the gateway answered.
	path := proxyPath(name, "/api/v1/namespaces/"+ns+"/configmaps/before")
	loop.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			r := timedGET{start: time.Now()}
			r.code, r.header, r.body, r.err = hubDoHeader(path)
			r.end = time.Now()
			mu.Lock()
			results = append(results, r)
			mu.Unlock()
			gets.Add(1)
		}
	})
	awaitGets(t, &gets, 10)
	t.Logf("killing %s (pid %d), which holds the watch", servers[victim].Name, servers[victim].Process.Pid())
	killStart := time.Now()
	if err := env.KillCluster(servers[victim]); err != nil {
		t.Fatal(err)
	}
	killed := time.Now() // the process is gone: its sockets are closed
	createConfigMap(t, direct, ns, "after-kill")
	awaitSeen(t, seen, "after-kill")
	awaitAddresses(t, name, victim != 0, victim != 1)
	atKill := gets.Load()
	awaitGets(t, &gets, atKill+20)
	close(done)
	loop.Wait()
	// docs/api.md: a request on a connection to an API server that dies
	// fails with 503 without Retry-After (client-go would send it again);
	// every request that starts once it is dead goes to the other address.
	var spanning, failed, after int
	var failures []string
	for _, r := range results {
		ok := r.err == nil && r.code == http.StatusOK
		switch {
		case r.start.After(killed):
			after++
			if !ok {
				t.Errorf("a GET started %s after %s was dead failed: %s", r.start.Sub(killed).Round(time.Millisecond), servers[victim].Name, r)
			}
		case r.end.Before(killStart):
			if !ok {
				t.Errorf("a GET that ended before the kill failed: %s", r)
			}
		default:
			spanning++
			if ok {
				continue
			}
			failed++
			failures = append(failures, r.String())
			if r.err != nil || r.code != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "" {
				t.Errorf("the GET in flight when %s died: %s; want 200, or 503 without Retry-After", servers[victim].Name, r)
			}
		}
	}
	if failed > 1 {
		t.Errorf("%d of the %d GETs in flight during the kill failed; at most the one on the killed server may", failed, spanning)
	}
	t.Logf("%d GETs: %d in flight during the kill (%s), %d of them failed %v; %d started after it",
		len(results), spanning, killed.Sub(killStart).Round(time.Millisecond), failed, failures, after)

	// Back again: the prober finds it, and requests go to it again.
	if err := env.StartCluster(ctx, servers[victim]); err != nil {
		t.Fatal(err)
	}
	awaitAddresses(t, name, true, true)
	back := configMapGets(t, servers[victim])
	for range 20 {
		if _, err := hub.CoreV1().ConfigMaps(ns).Get(ctx, "before", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := configMapGets(t, servers[victim]) - back; n < 5 {
		t.Fatalf("%s served %v of 20 GETs after it came back; want them spread again", servers[victim].Name, n)
	}
}

// awaitAddresses waits until the gateway's status shows each of its two
// addresses reachable or not as wanted, and the cluster Reachable.
func awaitAddresses(t *testing.T, name string, first, second bool) {
	t.Helper()
	c := gatewayClient(t, env.Hub.Kubeconfig)
	eventually(t, fmt.Sprintf("%s's addresses to be reachable %v, %v", name, first, second), func() error {
		gw, err := c.GatewayV1alpha1().ClusterGateways().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		st := gw.Status.Reachability
		if st == nil || len(st.Addresses) != 2 {
			return fmt.Errorf("status.reachability %+v", st)
		}
		if st.Addresses[0].Reachable != first || st.Addresses[1].Reachable != second {
			return fmt.Errorf("addresses %+v", st.Addresses)
		}
		for _, cond := range gw.Status.Conditions {
			if cond.Type == gatewayv1alpha1.ConditionReachable && cond.Status != metav1.ConditionTrue {
				return fmt.Errorf("Reachable %s: %s", cond.Status, cond.Message)
			}
		}
		return nil
	})
}

func awaitSeen(t *testing.T, seen <-chan string, name string) {
	t.Helper()
	timeout := time.After(pollTimeout) // a hang, not a speed
	for {
		select {
		case n := <-seen:
			if n == name {
				return
			}
		case <-timeout:
			t.Fatalf("the informer did not see configmap %s added", name)
		}
	}
}

func awaitGets(t *testing.T, gets *atomic.Int64, n int64) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d GETs", n), func() error {
		if g := gets.Load(); g < n {
			return fmt.Errorf("%d GETs", g)
		}
		return nil
	})
}

// configMapGets is how many GETs of a configmap s has served.
func configMapGets(t *testing.T, s *localenv.Cluster) float64 {
	return sumWith(scrapeAPIServer(t, s), "apiserver_request_total", `resource="configmaps"`, `verb="GET"`)
}

// configMapWatches is how many watches of configmaps s is serving.
func configMapWatches(t *testing.T, s *localenv.Cluster) float64 {
	return sumWith(scrapeAPIServer(t, s), "apiserver_longrunning_requests", `resource="configmaps"`, `verb="WATCH"`)
}

func scrapeAPIServer(t *testing.T, s *localenv.Cluster) testmetrics.Samples {
	t.Helper()
	c, err := s.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	m, err := testmetrics.Scrape(c, s.URL+"/metrics")
	if err != nil {
		t.Fatalf("%s /metrics: %v", s.Name, err)
	}
	return m
}

// sumWith adds the samples of name whose labels include each of labels.
func sumWith(m testmetrics.Samples, name string, labels ...string) float64 {
	sum := 0.0
	for k, v := range m {
		if !strings.HasPrefix(k, name+"{") {
			continue
		}
		all := true
		for _, l := range labels {
			all = all && strings.Contains(k, l)
		}
		if all {
			sum += v
		}
	}
	return sum
}

// timedGET is one GET of TestSeveralAddresses' loop: when it was sent and
// answered, and what came back.
type timedGET struct {
	start, end time.Time
	code       int
	header     http.Header
	body       string
	err        error
}

func (r timedGET) String() string {
	if r.err != nil {
		return fmt.Sprintf("error %v after %s", r.err, r.end.Sub(r.start).Round(time.Millisecond))
	}
	return fmt.Sprintf("%d (Retry-After %q) after %s: %.300s", r.code, r.header.Get("Retry-After"), r.end.Sub(r.start).Round(time.Millisecond), r.body)
}
