package health_test

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
	"github.com/clustergateway/cluster-gateway/pkg/health"
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
func startProber(t *testing.T, opts health.Config, probe health.ProbeFunc, names ...string) (*health.Prober, *fake.Clientset) {
	t.Helper()
	objs := []runtime.Object{}
	for _, n := range names {
		objs = append(objs, secret(n))
	}
	client := fake.NewClientset(objs...)
	store := gateways.NewStore(client, ns)
	// As pkg/apiserver wires it: the prober over the clusters' records,
	// which hold each gateway's probe state and tell the prober of each
	// gateway created, changed or deleted in the store.
	pl, err := pool.New(*pool.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pl.Close)
	owner, err := clusters.New(clusters.Config{Store: store, Pool: pl})
	if err != nil {
		t.Fatal(err)
	}
	p, err := health.New(opts, owner, probe)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { store.Run(ctx) })
	wg.Go(func() { p.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return p, client
}

// The status follows the thresholds, each change is told to subscribers,
// and the reason and message are the probe's.
func TestTransitions(t *testing.T) {
	var up atomic.Bool
	up.Store(true)
	p, _ := startProber(t, health.FastConfig(), func(context.Context, string) health.Outcome {
		if up.Load() {
			return health.Outcome{Reason: v1alpha1.ReasonReachable, Message: "ok", ServerVersion: "v1.37.2", Latency: time.Millisecond}
		}
		return health.Outcome{Reason: v1alpha1.ReasonDialFailed, Message: "connection refused"}
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

// However many clusters, at most Workers probes run at once; a deleted
// gateway is probed no more.
func TestBoundedWorkersAndDeletion(t *testing.T) {
	var running, most atomic.Int32
	probed := sync.Map{}
	names := make([]string, 20)
	for i := range names {
		names[i] = fmt.Sprintf("c%02d", i)
	}
	opts := health.FastConfig()
	opts.Workers = 3
	p, client := startProber(t, opts, func(_ context.Context, name string) health.Outcome {
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
		return health.Outcome{Reason: v1alpha1.ReasonReachable}
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
