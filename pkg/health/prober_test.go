package health

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/clustergateway/cluster-gateway/internal/testpoll"
	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/clusters"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
	"github.com/clustergateway/cluster-gateway/pkg/pool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const ns = "cluster-gateway-system"

func secret(name string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, ResourceVersion: "1", Labels: map[string]string{gateways.LabelGateway: "true"}},
		Data: map[string][]byte{
			gateways.KeyEndpoint: []byte("https://127.0.0.2:6443"), gateways.KeyInsecure: []byte("true"),
			gateways.KeyCredentialType: []byte("BearerToken"), gateways.KeyToken: []byte("t"),
		},
	}
}

// startProber runs a prober of the gateways in a fake clientset with probe,
// until the test ends.
func startProber(t *testing.T, opts Options, probe ProbeFunc, names ...string) (*Prober, *fake.Clientset) {
	t.Helper()
	objs := []runtime.Object{}
	for _, n := range names {
		objs = append(objs, secret(n))
	}
	client := fake.NewClientset(objs...)
	store := gateways.NewStore(client, ns)
	p, err := New(opts, probe)
	if err != nil {
		t.Fatal(err)
	}
	// As pkg/apiserver wires it: the clusters' records tell the prober of
	// each gateway created, changed or deleted in the store.
	pl, err := pool.New(*pool.NewOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pl.Close)
	if _, err := clusters.New(clusters.Config{Store: store, Pool: pl, Prober: p}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { store.Run(ctx) })
	wg.Go(func() { p.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return p, client
}

func fastOptions() Options {
	return Options{Interval: 5 * time.Millisecond, Timeout: time.Second, FailureThreshold: 2, SuccessThreshold: 2, MaxBackoff: 20 * time.Millisecond, Workers: 2}
}

// The status follows the thresholds, each change is told to subscribers,
// and the reason and message are the probe's.
func TestTransitions(t *testing.T) {
	var up atomic.Bool
	up.Store(true)
	p, _ := startProber(t, fastOptions(), func(context.Context, string) Outcome {
		if up.Load() {
			return Outcome{Reason: v1alpha1.ReasonReachable, Message: "ok", ServerVersion: "v1.37.2", Latency: time.Millisecond}
		}
		return Outcome{Reason: v1alpha1.ReasonDialFailed, Message: "connection refused"}
	}, "c")
	sub := p.Subscribe()
	defer sub.Close()
	status := func() metav1.ConditionStatus { r, _ := p.Get("c"); return r.Status }

	testpoll.EventuallyTrue(t, 30*time.Second, "True after the first good probe", func() bool { return status() == metav1.ConditionTrue })
	if r, _ := p.Get("c"); r.ServerVersion != "v1.37.2" || r.Reason != v1alpha1.ReasonReachable || r.LastProbeTime.IsZero() {
		t.Fatalf("reachable: %+v", r)
	}
	up.Store(false)
	testpoll.EventuallyTrue(t, 30*time.Second, "False after two failed probes", func() bool { return status() == metav1.ConditionFalse })
	if r, _ := p.Get("c"); r.Reason != v1alpha1.ReasonDialFailed || r.Message != "connection refused" {
		t.Fatalf("unreachable: %+v", r)
	}
	up.Store(true)
	testpoll.EventuallyTrue(t, 30*time.Second, "True again", func() bool { return status() == metav1.ConditionTrue })
	testpoll.EventuallyTrue(t, 30*time.Second, "the changes told to the subscriber", func() bool {
		select {
		case <-sub.Changed():
			for _, n := range sub.Take() {
				if n == "c" {
					return true
				}
			}
		default:
		}
		return false
	})
}

// fold's thresholds and backoff, step by step.
func TestFold(t *testing.T) {
	p := &Prober{opts: Options{Interval: time.Second, FailureThreshold: 3, SuccessThreshold: 2, MaxBackoff: 5 * time.Second}, now: time.Now}
	st := &state{interval: time.Second, result: Result{Status: metav1.ConditionUnknown}}
	ok, bad := Outcome{Reason: v1alpha1.ReasonReachable}, Outcome{Reason: v1alpha1.ReasonNoAnswer, Message: "silent"}
	steps := []struct {
		out      Outcome
		status   metav1.ConditionStatus
		changed  bool
		interval time.Duration
	}{
		{ok, metav1.ConditionTrue, true, time.Second}, // Unknown: the first good probe decides
		{bad, metav1.ConditionTrue, false, time.Second},
		{bad, metav1.ConditionTrue, false, time.Second},
		{bad, metav1.ConditionFalse, true, 2 * time.Second}, // the third: False, and back off
		{bad, metav1.ConditionFalse, false, 4 * time.Second},
		{bad, metav1.ConditionFalse, false, 5 * time.Second}, // capped
		{ok, metav1.ConditionFalse, false, time.Second},      // one good probe is not enough
		{ok, metav1.ConditionTrue, true, time.Second},
	}
	for i, s := range steps {
		changed := p.fold(st, s.out)
		if st.result.Status != s.status || changed != s.changed || st.interval != s.interval {
			t.Fatalf("step %d (%s): status %s changed %v interval %v; want %s %v %v", i, s.out.Reason, st.result.Status, changed, st.interval, s.status, s.changed, s.interval)
		}
	}
	if st.result.Reason != v1alpha1.ReasonReachable {
		t.Fatalf("reason %q", st.result.Reason)
	}
}

// However many clusters, at most Workers probes run at once; a deleted
// gateway is probed no more.
func TestBoundedWorkersAndDeletion(t *testing.T) {
	var running, most atomic.Int32
	probed := sync.Map{}
	names := make([]string, 20)
	for i := range names {
		names[i] = fmt.Sprintf("c%02d", i)
	}
	opts := fastOptions()
	opts.Workers = 3
	p, client := startProber(t, opts, func(_ context.Context, name string) Outcome {
		n := running.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(time.Millisecond)
		running.Add(-1)
		v, _ := probed.LoadOrStore(name, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
		return Outcome{Reason: v1alpha1.ReasonReachable}
	}, names...)
	testpoll.EventuallyTrue(t, 30*time.Second, "every cluster probed", func() bool {
		for _, n := range names {
			if r, ok := p.Get(n); !ok || r.Status != metav1.ConditionTrue {
				return false
			}
		}
		return true
	})
	if m := most.Load(); m > 3 {
		t.Fatalf("%d probes ran at once, want at most 3", m)
	}
	if err := client.CoreV1().Secrets(ns).Delete(context.Background(), "c00", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testpoll.EventuallyTrue(t, 30*time.Second, "the deleted gateway forgotten", func() bool { _, ok := p.Get("c00"); return !ok })
	v, _ := probed.Load("c00")
	before := v.(*atomic.Int64).Load()
	v1, _ := probed.Load("c01")
	other := v1.(*atomic.Int64).Load()
	testpoll.EventuallyTrue(t, 30*time.Second, "others probed on", func() bool { return v1.(*atomic.Int64).Load() > other+3 })
	if after := v.(*atomic.Int64).Load(); after > before+1 { // one may have been in flight
		t.Fatalf("the deleted gateway was probed %d more times", after-before)
	}
}

// Each probe's per-address outcomes replace the last ones, stamped with the
// probe's time; the condition follows the cluster's outcome.
func TestFoldKeepsEachAddress(t *testing.T) {
	p := &Prober{opts: fastOptions(), now: time.Now}
	st := &state{result: Result{Status: metav1.ConditionUnknown}}
	p.fold(st, Outcome{Reason: v1alpha1.ReasonReachable, Addresses: []AddressOutcome{
		{Address: "https://127.0.0.2:6443", Reason: v1alpha1.ReasonReachable},
		{Address: "https://127.0.0.3:6443", Reason: v1alpha1.ReasonDialFailed, Message: "refused"},
	}})
	r := st.result
	if r.Status != metav1.ConditionTrue || len(r.Addresses) != 2 || r.Addresses[1].Reason != v1alpha1.ReasonDialFailed || !r.Addresses[1].LastProbeTime.Equal(r.LastProbeTime) {
		t.Fatalf("after a probe with one address down: %+v", r)
	}
	p.fold(st, Outcome{Reason: v1alpha1.ReasonReachable})
	if len(st.result.Addresses) != 0 {
		t.Fatalf("a probe without addresses kept the old ones: %+v", st.result.Addresses)
	}
}
