package clusters

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/clustergateway/cluster-gateway/internal/testgateways"
	"github.com/clustergateway/cluster-gateway/internal/testpoll"
	"github.com/clustergateway/cluster-gateway/pkg/credentials"
	"github.com/clustergateway/cluster-gateway/pkg/fairness"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
	"github.com/clustergateway/cluster-gateway/pkg/health"
	"github.com/clustergateway/cluster-gateway/pkg/pool"
)

// The store, the pool and the prober run informers and goroutines: every
// test stops them.
func TestMain(m *testing.M) {
	credentials.RunLauncherIfAsked() // credential providers run through this binary
	goleak.VerifyTestMain(m)
}

const ns = "cluster-gateway-system"

// gatewaySecret is a Ready BearerToken gateway for endpoint. Nothing is
// dialed: a lease builds a transport without connecting.
func gatewaySecret(name, endpoint, token string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{gateways.LabelGateway: "true"}},
		Data: map[string][]byte{
			gateways.KeyEndpoint: []byte(endpoint), gateways.KeyInsecure: []byte("true"),
			gateways.KeyCredentialType: []byte("BearerToken"), gateways.KeyToken: []byte(token),
		},
	}
}

// fixture is the store over a fake clientset, a pool that never retires
// idle entries (the janitor would hide an entry a broken deletion left
// behind), a limiter, the Owner over them, and a real prober over the
// Owner's records, as pkg/apiserver wires them; all stopped when the test
// ends.
type fixture struct {
	client  *fake.Clientset
	store   *gateways.Store
	pool    *pool.Pool
	prober  *health.Prober
	limiter *fairness.Limiter
	owner   *Owner
}

func start(t *testing.T, secrets ...*corev1.Secret) *fixture {
	t.Helper()
	objs := make([]runtime.Object, 0, len(secrets))
	for _, s := range secrets {
		objs = append(objs, s)
	}
	f := &fixture{client: fake.NewClientset(objs...)}
	// A fake clientset does not replay what was written between an
	// informer's list and its watch: the fixture returns once the store
	// watches its gateway Secrets, so a test's writes right after are seen.
	// The store also watches the other Secrets (credential sources): only
	// the watch with the gateways' label selector counts, else a write
	// between the two watches could be lost for good.
	watching := make(chan struct{})
	var once sync.Once
	f.client.PrependWatchReactor("secrets", func(a k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions // as the fake's own watch reactor
		if wa, ok := a.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		w, err := f.client.Tracker().Watch(a.GetResource(), a.GetNamespace(), opts)
		if opts.LabelSelector == gateways.LabelGateway+"=true" {
			once.Do(func() { close(watching) })
		}
		return true, w, err
	})
	f.store = gateways.NewStore(f.client, ns)
	po := pool.DefaultConfig()
	po.IdleTTL = 0
	var err error
	if f.pool, err = pool.New(*po); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.pool.Close)
	if f.limiter, err = fairness.New(*fairness.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	if f.owner, err = New(Config{Store: f.store, Pool: f.pool, Limiter: f.limiter}); err != nil {
		t.Fatal(err)
	}
	// Probes that never reach anything: what is asserted is which
	// clusters the prober knows, not what it finds.
	if f.prober, err = health.New(health.Config{Interval: time.Hour, Timeout: time.Second, FailureThreshold: 1, SuccessThreshold: 1, MaxBackoff: time.Hour, Workers: 1}, f.owner,
		func(context.Context, string) health.Outcome {
			return health.Outcome{Reason: "DialFailed", Message: "not dialed in this test"}
		}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { f.store.Run(ctx) })
	wg.Go(func() { f.prober.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	testpoll.EventuallyTrue(t, 30*time.Second, "the store syncs", f.store.HasSynced)
	select {
	case <-watching:
	case <-time.After(30 * time.Second):
		t.Fatal("the store did not watch its Secrets within 30s")
	}
	return f
}

// waitFor waits until the store holds name (or, with gone, no longer does).
func (f *fixture) waitFor(t *testing.T, name string, gone bool) *gateways.Gateway {
	t.Helper()
	var gw *gateways.Gateway
	testpoll.Eventually(t, 30*time.Second, fmt.Sprintf("the store sees %s (deleted: %v)", name, gone), func() error {
		g, err := f.store.Get(name)
		if gone {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("still there: %v", err)
		}
		gw = g
		return err
	})
	return gw
}

// take is what a proxied request does first: it takes the named cluster's
// record (Take), reading its gateway.
func (f *fixture) take(t *testing.T, name string) Handle {
	t.Helper()
	h, err := f.owner.Take(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// slots are the named cluster's Slots as a request takes them (Take, then
// Handle.Slots); nil when the store has no such cluster.
func (f *fixture) slots(t *testing.T, name string) *fairness.Slots {
	t.Helper()
	h, err := f.owner.Take(context.Background(), name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return h.Slots()
}

// A request that read its gateway before the gateway was deleted and
// reaches the pool after the deletion's step leaves no entry behind (seen
// in e2e: 200 gateways deleted under traffic left some). It is answered as
// the store answers for a gateway that is gone: NotFound.
func TestNoEntryLeftForADeletedGateway(t *testing.T) {
	f := start(t, gatewaySecret("c", "https://127.0.0.1:6443", "t"))
	f.waitFor(t, "c", false)
	stale := f.take(t, "c")

	if err := f.client.CoreV1().Secrets(ns).Delete(context.Background(), "c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor(t, "c", true)
	testpoll.EventuallyTrue(t, 30*time.Second, "the deletion step ends the record", func() bool { return f.owner.Len() == 0 })
	if _, ok := f.prober.Get("c"); ok {
		t.Error("the deletion step did not tell the prober")
	}
	if _, _, err := stale.Lease(); !apierrors.IsNotFound(err) {
		t.Fatalf("a request that read the gateway before its deletion: %v, want NotFound", err)
	}
	if n := f.pool.Len(); n != 0 {
		t.Fatalf("%d live pool entries after a request to a deleted gateway, want 0", n)
	}
	if n := f.owner.Len(); n != 0 {
		t.Fatalf("%d records after a request to a deleted gateway, want 0", n)
	}
}

// A lease taken before the deletion goes on; the deletion step retires its
// entry, so nothing is left once it is released.
func TestLeaseBeforeDeletionIsRetired(t *testing.T) {
	f := start(t, gatewaySecret("c", "https://127.0.0.1:6443", "t"))
	f.waitFor(t, "c", false)
	lease, _, err := f.take(t, "c").Lease()
	if err != nil {
		t.Fatal(err)
	}
	if lease.Transport() == nil || f.pool.Len() != 1 {
		t.Fatalf("lease transport %v, %d pool entries; want a transport and 1 entry", lease.Transport(), f.pool.Len())
	}
	if _, ok := f.prober.Get("c"); !ok {
		t.Error("the creation step did not tell the prober")
	}
	if err := f.client.CoreV1().Secrets(ns).Delete(context.Background(), "c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testpoll.EventuallyTrue(t, 30*time.Second, "the deletion step retires the entry", func() bool { return f.pool.Len() == 0 })
	lease.Release()
	if n := f.pool.Len(); n != 0 {
		t.Fatalf("%d live pool entries after the deletion, want 0", n)
	}
}

// A change of how the cluster is reached retires its entry in the change's
// step; a new token alone keeps it (it is sent per request), and the
// followers are told both, after the record took them.
func TestChangeStep(t *testing.T) {
	f := start(t, gatewaySecret("c", "https://127.0.0.1:6443", "t1"))
	seen := make(chan *gateways.Gateway, 16)
	f.owner.OnChange(func(_, new *gateways.Gateway) {
		if new != nil {
			seen <- new
		}
	})
	f.waitFor(t, "c", false)
	h := f.take(t, "c")
	lease, _, err := h.Lease()
	if err != nil {
		t.Fatal(err)
	}
	lease.Release()
	update := func(endpoint, token string) {
		t.Helper()
		if _, err := f.client.CoreV1().Secrets(ns).Update(context.Background(), gatewaySecret("c", endpoint, token), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		for deadline := time.After(30 * time.Second); ; {
			select {
			case g := <-seen:
				if g.Conn.Token == token && g.Conn.Endpoint.Address == endpoint {
					return
				}
			case <-deadline:
				t.Fatalf("no follower was told of endpoint %s token %s", endpoint, token)
			}
		}
	}
	update("https://127.0.0.1:6443", "t2")
	if n := f.pool.Len(); n != 1 {
		t.Fatalf("after a new token: %d pool entries, want the 1 it had", n)
	}
	update("https://127.0.0.2:6443", "t2")
	if n := f.pool.Len(); n != 0 {
		t.Fatalf("after a new address: %d live pool entries, want 0 (retired in the change's step)", n)
	}
	// A request that read the old version goes as the gateway is now.
	lease, leased, err := h.Lease()
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release()
	if leased.Conn.Endpoint.Address != "https://127.0.0.2:6443" {
		t.Errorf("a lease for the old version is for %s, want the new address", leased.Conn.Endpoint.Address)
	}
}

// Creations, deletions and leases of the same clusters at once (run with
// -race) leave the pool empty once every gateway is deleted: no lease
// creates an entry after its cluster's deletion step.
func TestCreateDeleteLeaseRace(t *testing.T) {
	f := start(t)
	names := []string{"c0", "c1", "c2", "c3"}
	const cycles = 25
	ctx := context.Background()
	var stop atomic.Bool
	var leased atomic.Int64
	var writers, leasers sync.WaitGroup
	for _, name := range names {
		writers.Go(func() {
			for range cycles {
				if _, err := f.client.CoreV1().Secrets(ns).Create(ctx, gatewaySecret(name, "https://127.0.0.1:6443", "t"), metav1.CreateOptions{}); err != nil {
					t.Error(err)
					return
				}
				// Until the store has it, so that leases can race the deletion.
				for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
					if _, err := f.store.Get(name); err == nil {
						break
					}
				}
				time.Sleep(time.Millisecond)
				if err := f.client.CoreV1().Secrets(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for i := range 4 {
		leasers.Go(func() {
			for n := i; !stop.Load(); n++ {
				h, err := f.owner.Take(ctx, names[n%len(names)])
				if err != nil {
					continue
				}
				if l, _, err := h.Lease(); err == nil {
					leased.Add(1)
					l.Release()
				} else if !apierrors.IsNotFound(err) {
					t.Errorf("lease: %v", err)
					return
				}
			}
		})
	}
	writers.Wait()
	stop.Store(true)
	leasers.Wait()
	if leased.Load() == 0 {
		t.Fatal("no lease was taken: the race was not run")
	}
	for _, name := range names {
		f.waitFor(t, name, true)
	}
	testpoll.Eventually(t, 30*time.Second, "every deletion step ends its record and its pool entry", func() error {
		if n, m := f.owner.Len(), f.pool.Len(); n != 0 || m != 0 {
			return fmt.Errorf("%d records, %d live pool entries", n, m)
		}
		return nil
	})
	for _, name := range names {
		if _, ok := f.prober.Get(name); ok {
			t.Errorf("the prober still knows deleted cluster %s", name)
		}
	}
}

// The interleaving the race test rarely hits, made to happen: a request
// finds the record, then the deletion step takes the record's lock first
// and passes. The request's lease must see that and answer NotFound, not
// create an entry that no step would retire. The test holds the record's
// lock to order the two, and runs the deletion step's own code under it.
func TestLeaseAfterTheDeletionStepPassed(t *testing.T) {
	f := start(t, gatewaySecret("c", "https://127.0.0.1:6443", "t"))
	f.waitFor(t, "c", false)
	var rec *record
	testpoll.EventuallyTrue(t, 30*time.Second, "the creation step makes the record", func() bool {
		f.owner.mu.RLock()
		defer f.owner.mu.RUnlock()
		rec = f.owner.records["c"]
		return rec != nil
	})
	h := f.take(t, "c")
	rec.mu.Lock()
	done := make(chan error, 1)
	go func() {
		l, _, err := h.Lease()
		if err == nil {
			l.Release()
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond) // the lease finds the record and waits for its lock
	if err := f.client.CoreV1().Secrets(ns).Delete(context.Background(), "c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor(t, "c", true)
	testpoll.EventuallyTrue(t, 30*time.Second, "the deletion step takes the record out of the map", func() bool { return f.owner.Len() == 0 })
	f.owner.endLocked("c", rec, nil) // what the deletion step does under the lock it waits for
	rec.mu.Unlock()
	if err := <-done; !apierrors.IsNotFound(err) {
		t.Errorf("a lease through a record whose deletion step passed: %v, want NotFound", err)
	}
	if n := f.pool.Len(); n != 0 {
		t.Fatalf("%d live pool entries after a lease through a deleted record, want 0", n)
	}
}

// A deleted gateway's provider state (client-go's Authenticator, the
// provider's files) is released in its record's deletion step. (Moved from
// pkg/gateways' TestProviderGateways with the release it tested.)
func TestDeletionReleasesTheProviderState(t *testing.T) {
	providers := testProviders(t)
	s := gatewaySecret("good", "https://127.0.0.1:6443", "")
	s.Data[gateways.KeyCredentialType] = []byte("Provider")
	s.Data[gateways.KeyProvider] = []byte("ok")
	delete(s.Data, gateways.KeyToken)
	client := fake.NewClientset(s)
	store := gateways.NewStore(client, ns)
	owner := newOwner(t, store, providers)
	testgateways.Run(t, store.Run, "the store syncs", store.HasSynced)

	g, err := owner.GetForRequest(context.Background(), "good")
	if err != nil || !g.Ready || g.Conn.Token != "tok-1" {
		t.Fatalf("good = %+v, %v; want Ready with the provider's token", g, err)
	}
	before := providers.Len()
	if before == 0 {
		t.Fatal("the provider holds no state for the gateway it ran for")
	}
	if err := client.CoreV1().Secrets(ns).Delete(context.Background(), "good", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testpoll.EventuallyTrue(t, 10*time.Second, "the deleted gateway's provider state to be released", func() bool {
		return providers.Len() == before-1
	})
}

// A certificate that expires with no write since is not leased: the lease
// judges the record's gateway at its own time, as the request judged the
// gateway it read (the record's last step saw it valid).
func TestExpiredWithoutAWriteIsNotLeased(t *testing.T) {
	ctx := context.Background()
	notAfter := time.Now().Add(15 * time.Second)
	gw := testgateways.X509Gateway(testgateways.ClientCredential(t, time.Now().Add(-time.Hour), notAfter))
	gw.Name, gw.Spec.Endpoint.ProxyURL = "c", ""
	f := start(t, mustToSecret(t, gw, nil))
	testpoll.Eventually(t, 10*time.Second, "a lease before the certificate expires", func() error {
		h, err := f.owner.Take(ctx, "c")
		if err != nil {
			return err
		}
		l, _, err := h.Lease()
		if err != nil {
			return err
		}
		l.Release()
		return nil
	})
	time.Sleep(time.Until(notAfter) + time.Second)
	h := f.take(t, "c")
	if h.Gateway().Ready {
		t.Fatal("the gateway read after its certificate expired is Ready")
	}
	if l, _, err := h.Lease(); err == nil {
		l.Release()
		t.Fatal("a lease for a gateway whose certificate expired, with no write since, was granted")
	} else if !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("a lease for an expired gateway: %v, want ServiceUnavailable", err)
	}
}

// A record holds its cluster's probe state and limiter slots: made in the
// creation step, started over (the probe state) when the cluster is reached
// differently, and gone with the record in the deletion step; a gateway
// created again under the same name starts with new ones.
func TestRecordHoldsProbeStateAndSlots(t *testing.T) {
	f := start(t, gatewaySecret("c", "https://127.0.0.1:6443", "t"))
	f.waitFor(t, "c", false)
	var st *health.State
	testpoll.EventuallyTrue(t, 30*time.Second, "the creation step makes the probe state", func() bool {
		st = f.owner.ProbeState("c")
		return st != nil
	})
	slots := f.slots(t, "c")
	if slots == nil {
		t.Fatal("the record has no limiter slots")
	}
	release, err := f.limiter.Acquire(context.Background(), slots, "alice", fairness.Request)
	if err != nil {
		t.Fatal(err)
	}
	if s := f.limiter.Stats(); s.InFlight[fairness.Request] != 1 || s.Clusters != 1 {
		t.Fatalf("a slot taken through the record: %+v, want 1 in flight on 1 cluster", s)
	}
	if _, err := f.client.CoreV1().Secrets(ns).Update(context.Background(), gatewaySecret("c", "https://127.0.0.2:6443", "t"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testpoll.EventuallyTrue(t, 30*time.Second, "the change step starts the probe state over", func() bool {
		g, err := f.owner.Get("c")
		return err == nil && g.Conn.Endpoint.Address == "https://127.0.0.2:6443"
	})
	if f.owner.ProbeState("c") != st || f.slots(t, "c") != slots {
		t.Fatal("a change step replaced the record's probe state or slots; it keeps them")
	}
	if err := f.client.CoreV1().Secrets(ns).Delete(context.Background(), "c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor(t, "c", true)
	testpoll.EventuallyTrue(t, 30*time.Second, "the deletion step drops the record", func() bool { return f.owner.Len() == 0 })
	if f.owner.ProbeState("c") != nil || f.slots(t, "c") != nil {
		t.Fatal("a deleted cluster still has a probe state or slots")
	}
	release() // a request that held a slot of the deleted cluster gives it back
	if s := f.limiter.Stats(); s.InFlight[fairness.Request] != 0 || s.Clusters != 0 {
		t.Fatalf("after the last request of a deleted cluster: %+v, want nothing in flight", s)
	}
	if _, err := f.client.CoreV1().Secrets(ns).Create(context.Background(), gatewaySecret("c", "https://127.0.0.1:6443", "t"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testpoll.EventuallyTrue(t, 30*time.Second, "the creation step of the new gateway", func() bool { return f.owner.ProbeState("c") != nil })
	if f.owner.ProbeState("c") == st || f.slots(t, "c") == slots {
		t.Fatal("a gateway created again took the deleted one's probe state or slots")
	}
}

// A proxied request or a probe takes its cluster's record once (Take): the
// handle's Slots, Target and Lease go through that record without reading
// the Owner's map again. A handle whose record was deleted leases through the record of
// the gateway created again under the same name, as that gateway is now,
// and once that one is deleted too it is NotFound and leaves nothing in the
// pool.
func TestHandleLeasesThroughTheRecordItTook(t *testing.T) {
	f := start(t, gatewaySecret("c", "https://127.0.0.1:6443", "t"))
	f.waitFor(t, "c", false)
	h, err := f.owner.Take(context.Background(), "c")
	if err != nil {
		t.Fatal(err)
	}
	if rec := f.owner.lookup("c"); h.Gateway().Conn.Token != "t" || h.Slots() == nil || h.Slots() != rec.slotsOf() {
		t.Fatalf("handle: token %q, slots %p; want token t and the record's slots %p", h.Gateway().Conn.Token, h.Slots(), rec.slotsOf())
	}
	// With the map locked, the handle still reaches its record.
	f.owner.mu.Lock()
	done := make(chan error, 1)
	go func() {
		_ = h.Slots()
		if _, err := h.Target(); err != nil {
			done <- err
			return
		}
		l, _, err := h.Lease()
		if err == nil {
			l.Release()
		}
		done <- err
	}()
	select {
	case err := <-done:
		f.owner.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		f.owner.mu.Unlock()
		<-done
		t.Fatal("the handle's Slots, Target and Lease waited for the Owner's map: they looked the record up again")
	}

	if err := f.client.CoreV1().Secrets(ns).Delete(context.Background(), "c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testpoll.EventuallyTrue(t, 30*time.Second, "the deletion step ends the record", func() bool { return f.owner.Len() == 0 })
	if _, err := f.client.CoreV1().Secrets(ns).Create(context.Background(), gatewaySecret("c", "https://127.0.0.2:6443", "t"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testpoll.EventuallyTrue(t, 30*time.Second, "the creation step of the new gateway", func() bool { return f.owner.Len() == 1 })
	l, leased, err := h.Lease()
	if err != nil {
		t.Fatalf("a handle of the deleted record, with the gateway created again: %v", err)
	}
	l.Release()
	if leased.Conn.Endpoint.Address != "https://127.0.0.2:6443" {
		t.Errorf("a handle of the deleted record leased for %s, want the new gateway's address", leased.Conn.Endpoint.Address)
	}

	if err := f.client.CoreV1().Secrets(ns).Delete(context.Background(), "c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor(t, "c", true)
	testpoll.EventuallyTrue(t, 30*time.Second, "the deletion step ends the new record", func() bool { return f.owner.Len() == 0 })
	if _, _, err := h.Lease(); !apierrors.IsNotFound(err) {
		t.Fatalf("a handle of a deleted gateway: %v, want NotFound", err)
	}
	if n := f.pool.Len(); n != 0 {
		t.Fatalf("%d live pool entries after a lease through a deleted gateway's handle, want 0", n)
	}
}
