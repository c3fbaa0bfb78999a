package fairness

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	testingclock "k8s.io/utils/clock/testing"
)

func newLimiter(t *testing.T, requests, streams, queued int, wait time.Duration) *Limiter {
	t.Helper()
	l, err := New(Config{MaxRequests: requests, MaxStreams: streams, MaxQueued: queued, QueueWait: wait})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// mustAcquire takes a slot that must be free now.
func mustAcquire(t *testing.T, l *Limiter, cluster, caller string, kind Kind) func() {
	t.Helper()
	release, err := l.Acquire(context.Background(), slotsOf(l, cluster), caller, kind)
	if err != nil {
		t.Fatalf("%s slot of %s for %s: %v", kind, cluster, caller, err)
	}
	return release
}

// waitFor polls the limiter's state (a condition, not a timing).
func waitFor(t *testing.T, l *Limiter, what string, cond func(Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond(l.Stats()) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 30s: %s; stats %+v", what, l.Stats())
		}
		time.Sleep(time.Millisecond)
	}
}

// wantNoState: nothing in flight, queued or remembered for any cluster.
func wantNoState(t *testing.T, l *Limiter) {
	t.Helper()
	s := l.Stats()
	if s.Clusters != 0 || s.InFlight != [numKinds]int{} || s.Queued != [numKinds]int{} || s.Saturated != [numKinds]int{} {
		t.Fatalf("state left behind: %+v", s)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	busy := 0
	for _, c := range slotsOfAll(l) {
		if !c.idle() {
			busy++
		}
	}
	if busy != 0 {
		t.Fatalf("%d clusters' slots left with a request in flight or queued", busy)
	}
}

// testSlots are the Slots the tests' clusters have, by limiter and name:
// what the clusters' records hold in the gateway.
var testSlots struct {
	sync.Mutex
	of map[*Limiter]map[string]*Slots
}

// slotsOf is the named cluster's Slots of l, made on first use as a
// record's creation step makes them.
func slotsOf(l *Limiter, cluster string) *Slots {
	testSlots.Lock()
	defer testSlots.Unlock()
	if testSlots.of == nil {
		testSlots.of = map[*Limiter]map[string]*Slots{}
	}
	m := testSlots.of[l]
	if m == nil {
		m = map[string]*Slots{}
		testSlots.of[l] = m
	}
	c := m[cluster]
	if c == nil {
		c = l.NewSlots(cluster)
		m[cluster] = c
	}
	return c
}

// slotsOfAll are every cluster's Slots of l made by slotsOf.
func slotsOfAll(l *Limiter) []*Slots {
	testSlots.Lock()
	defer testSlots.Unlock()
	var all []*Slots
	for _, c := range testSlots.of[l] {
		all = append(all, c)
	}
	return all
}

// queued starts Acquire in a goroutine and returns its outcome channel; the
// slot, if granted, is released when the test says so.
type pending struct {
	caller string
	done   chan error
	admit  chan struct{} // closed when granted
	free   chan struct{} // close to release the slot
}

func acquireAsync(ctx context.Context, l *Limiter, cluster, caller string, kind Kind) *pending {
	p := &pending{caller: caller, done: make(chan error, 1), admit: make(chan struct{}), free: make(chan struct{})}
	go func() {
		release, err := l.Acquire(ctx, slotsOf(l, cluster), caller, kind)
		if err != nil {
			p.done <- err
			return
		}
		close(p.admit)
		<-p.free
		release()
		p.done <- nil
	}()
	return p
}

// A cluster whose slots are all taken and whose queue is full does not
// delay another cluster: its slot is granted at once.
func TestSaturatedClusterDoesNotBlockAnother(t *testing.T) {
	l := newLimiter(t, 2, 2, 2, time.Minute)
	var held []func()
	for range 2 {
		held = append(held, mustAcquire(t, l, "slow", "alice", Request))
	}
	ctx, cancel := context.WithCancel(context.Background())
	q := []*pending{acquireAsync(ctx, l, "slow", "alice", Request), acquireAsync(ctx, l, "slow", "bob", Request)}
	waitFor(t, l, "two queued for slow", func(s Stats) bool { return s.Queued[Request] == 2 })
	if _, err := l.Acquire(context.Background(), slotsOf(l, "slow"), "carol", Request); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("a full queue: %v, want 429", err)
	}
	for range 2 {
		mustAcquire(t, l, "fast", "carol", Request)()
	}
	if s := l.Stats(); s.Saturated[Request] != 1 || s.Clusters != 1 {
		t.Fatalf("stats %+v: want slow saturated and fast forgotten", s)
	}
	cancel()
	for _, p := range q {
		if err := <-p.done; !errors.Is(err, context.Canceled) {
			t.Fatalf("a canceled waiter: %v, want context.Canceled", err)
		}
	}
	for _, r := range held {
		r()
	}
	wantNoState(t, l)
}

// Ordinary and long-running requests have slots and queues of their own:
// watches filling a cluster's stream slots leave its ordinary slots free,
// and the other way round.
func TestKindsCountedApart(t *testing.T) {
	l := newLimiter(t, 1, 1, 0, time.Minute)
	watch := mustAcquire(t, l, "c", "alice", Stream)
	if _, err := l.Acquire(context.Background(), slotsOf(l, "c"), "alice", Stream); !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "--max-streams-per-cluster") {
		t.Fatalf("a second stream with 1 stream slot: %v, want 429 naming --max-streams-per-cluster", err)
	}
	get := mustAcquire(t, l, "c", "alice", Request)
	if _, err := l.Acquire(context.Background(), slotsOf(l, "c"), "alice", Request); !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "--max-requests-per-cluster") {
		t.Fatalf("a second request with 1 request slot: %v, want 429 naming --max-requests-per-cluster", err)
	}
	watch()
	mustAcquire(t, l, "c", "alice", Stream)()
	get()
	wantNoState(t, l)
}

// Callers take turns in a cluster's queue: a caller with 100 queued
// requests delays another caller's single request by one grant at most.
func TestRoundRobinAmongCallers(t *testing.T) {
	l := newLimiter(t, 1, 1, 200, time.Hour)
	hold := acquireAsync(context.Background(), l, "c", "holder", Request)
	<-hold.admit
	var all []*pending
	for range 100 {
		all = append(all, acquireAsync(context.Background(), l, "c", "busy", Request))
	}
	waitFor(t, l, "100 queued for busy", func(s Stats) bool { return s.Queued[Request] == 100 })
	all = append(all, acquireAsync(context.Background(), l, "c", "quiet", Request))
	waitFor(t, l, "quiet queued behind them", func(s Stats) bool { return s.Queued[Request] == 101 })

	// One slot: release it and see who gets it, 101 times.
	var order []*pending
	granted := map[*pending]bool{}
	current := hold
	for range len(all) {
		close(current.free)
		if err := <-current.done; err != nil {
			t.Fatal(err)
		}
		current = nil
		for current == nil {
			for _, p := range all {
				select {
				case <-p.admit:
					if !granted[p] {
						current = p
					}
				default:
				}
			}
			time.Sleep(time.Millisecond)
		}
		granted[current] = true
		order = append(order, current)
	}
	close(current.free)
	<-current.done
	for i, p := range order {
		if p.caller == "quiet" && i > 1 {
			t.Fatalf("quiet's one request was granted after %d of busy's, want after one at most", i)
		}
	}
	wantNoState(t, l)
}

// A full queue, and a wait that runs out, answer 429 with Retry-After in
// the Status, naming the cluster, the limit and the flags that set it.
func TestRefusals(t *testing.T) {
	l := newLimiter(t, 1, 1, 1, time.Hour)
	held := mustAcquire(t, l, "prod-eu", "alice", Request)
	ctx, cancel := context.WithCancel(context.Background())
	q := acquireAsync(ctx, l, "prod-eu", "alice", Request)
	waitFor(t, l, "one queued", func(s Stats) bool { return s.Queued[Request] == 1 })

	_, err := l.Acquire(context.Background(), slotsOf(l, "prod-eu"), "bob", Request)
	wantRefusal(t, err, "prod-eu", "its 1 slots for ordinary requests are taken", "--max-requests-per-cluster", "1 more are waiting (--max-queued-per-cluster)")
	cancel()
	<-q.done
	held()

	short := newLimiter(t, 1, 1, 1, time.Millisecond)
	held = mustAcquire(t, short, "prod-eu", "alice", Stream)
	_, err = short.Acquire(context.Background(), slotsOf(short, "prod-eu"), "bob", Stream)
	wantRefusal(t, err, "prod-eu", "waited 1ms (the gateway's --queue-wait-timeout)", "long-running requests", "--max-streams-per-cluster")
	held()

	for _, lim := range []*Limiter{l, short} {
		wantNoState(t, lim)
	}
	if s := l.Stats(); s.Refused[Request][reasonQueueFull] != 1 || s.Refused[Request][reasonCanceled] != 1 {
		t.Fatalf("refusals %+v: want one queue_full and one canceled", s.Refused)
	}
	if s := short.Stats(); s.Refused[Stream][reasonTimeout] != 1 || s.Waited[Stream] != 1 {
		t.Fatalf("refusals %+v, waited %v: want one stream timeout after one wait", s.Refused, s.Waited)
	}
}

func wantRefusal(t *testing.T, err error, cluster string, says ...string) {
	t.Helper()
	var se *apierrors.StatusError
	if !errors.As(err, &se) || !apierrors.IsTooManyRequests(err) {
		t.Fatalf("got %v, want a 429 Status", err)
	}
	if d, ok := apierrors.SuggestsClientDelay(err); !ok || d != MinRetryAfterSeconds {
		t.Fatalf("Retry-After %d (%v), want %d before any slot was given back", d, ok, MinRetryAfterSeconds)
	}
	if det := se.ErrStatus.Details; det == nil || det.Name != cluster || det.Kind != "clustergateways" {
		t.Fatalf("details %+v, want the ClusterGateway %s", det, cluster)
	}
	for _, s := range append(says, fmt.Sprintf("cluster %q", cluster)) {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%q does not say %q", err, s)
		}
	}
}

// Retry-After follows the cluster's pace: how long the requests queued now
// take to get a slot, from how long slots were held, between 1s and the
// queue wait.
func TestRetryAfterFollowsTheClustersPace(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	l, err := newWithClock(Config{MaxRequests: 2, MaxStreams: 1, MaxQueued: 2, QueueWait: 10 * time.Second}, clk)
	if err != nil {
		t.Fatal(err)
	}
	retryAfter := func() int {
		t.Helper()
		_, err := l.Acquire(context.Background(), slotsOf(l, "slow"), "alice", Request) // alice: her own full queue refuses her
		d, ok := apierrors.SuggestsClientDelay(err)
		if !apierrors.IsTooManyRequests(err) || !ok {
			t.Fatalf("want a 429 with Retry-After, got %v", err)
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("retry after %ds", d)) {
			t.Fatalf("%q does not say its Retry-After %ds", err, d)
		}
		return d
	}
	// Two slots held 3s each, then two more requests take them and two queue.
	a, b := mustAcquire(t, l, "slow", "alice", Request), mustAcquire(t, l, "slow", "alice", Request)
	q := []*pending{acquireAsync(context.Background(), l, "slow", "alice", Request), acquireAsync(context.Background(), l, "slow", "alice", Request)}
	waitFor(t, l, "two queued", func(s Stats) bool { return s.Queued[Request] == 2 })
	if got := retryAfter(); got != MinRetryAfterSeconds {
		t.Fatalf("Retry-After %d before any slot was given back, want %d", got, MinRetryAfterSeconds)
	}
	clk.Step(3 * time.Second)
	a()
	b()
	for _, p := range q {
		<-p.admit
	}
	q = append(q, acquireAsync(context.Background(), l, "slow", "alice", Request), acquireAsync(context.Background(), l, "slow", "alice", Request))
	waitFor(t, l, "two queued again", func(s Stats) bool { return s.Queued[Request] == 2 })
	// Three requests (two queued and this one) over two slots held 3s: 4.5s.
	if got := retryAfter(); got != 5 {
		t.Fatalf("Retry-After %d with two queued for two slots held 3s, want 5", got)
	}

	// Never beyond the queue wait.
	clk = testingclock.NewFakeClock(time.Now())
	slow, err := newWithClock(Config{MaxRequests: 1, MaxStreams: 1, MaxQueued: 3, QueueWait: 2 * time.Second}, clk)
	if err != nil {
		t.Fatal(err)
	}
	first := mustAcquire(t, slow, "c", "alice", Request)
	next := acquireAsync(context.Background(), slow, "c", "alice", Request)
	waitFor(t, slow, "one queued", func(s Stats) bool { return s.Queued[Request] == 1 })
	clk.Step(1500 * time.Millisecond) // under the queue wait: next still waits
	first()
	<-next.admit
	more := []*pending{next}
	for range 3 {
		more = append(more, acquireAsync(context.Background(), slow, "c", "alice", Request))
	}
	waitFor(t, slow, "three queued", func(s Stats) bool { return s.Queued[Request] == 3 })
	_, err = slow.Acquire(context.Background(), slotsOf(slow, "c"), "alice", Request)
	if d, _ := apierrors.SuggestsClientDelay(err); d != 2 {
		t.Fatalf("Retry-After %d for four requests over one slot held 1.5s (6s), with a 2s queue wait, want 2 (%v)", d, err)
	}
	for _, p := range append(q, more...) {
		close(p.free)
	}
	for _, p := range append(q, more...) {
		if err := <-p.done; err != nil {
			t.Fatal(err)
		}
	}
	wantNoState(t, l)
	wantNoState(t, slow)
}

// Releasing twice gives one slot back; a bound of 0 keeps no state at all;
// a nil limiter bounds nothing.
func TestReleaseOnceAndNoBound(t *testing.T) {
	l := newLimiter(t, 1, 0, 0, time.Second)
	r := mustAcquire(t, l, "c", "alice", Request)
	r()
	r()
	r2 := mustAcquire(t, l, "c", "alice", Request)
	if _, err := l.Acquire(context.Background(), slotsOf(l, "c"), "alice", Request); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("a double release freed two slots: %v", err)
	}
	r2()
	var streams []func()
	for range 100 {
		streams = append(streams, mustAcquire(t, l, "c", "alice", Stream))
	}
	if s := l.Stats(); s.Clusters != 0 {
		t.Fatalf("unbounded streams left state: %+v", s)
	}
	for _, r := range streams {
		r()
	}
	var none *Limiter
	mustAcquire(t, none, "c", "alice", Request)()
	wantNoState(t, l)
}

// Under concurrent churn over clusters, callers, kinds, cancellations and
// timeouts, no cluster ever has more in flight than its bound, and at the end
// no state, waiter or goroutine is left.
func TestChurnLeavesNothing(t *testing.T) {
	const limit = 3
	l := newLimiter(t, limit, limit, 5, 5*time.Millisecond)
	var inFlight [4][numKinds]atomic.Int32
	var over atomic.Int32
	var wg sync.WaitGroup
	for g := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				c, kind := (g+i)%4, Kinds[i%2]
				ctx, cancel := context.WithCancel(context.Background())
				if i%7 == 0 {
					cancel()
				}
				release, err := l.Acquire(ctx, slotsOf(l, fmt.Sprintf("cluster-%d", c)), fmt.Sprintf("user-%d", g%5), kind)
				cancel()
				if err != nil {
					continue
				}
				if inFlight[c][kind].Add(1) > limit {
					over.Add(1)
				}
				if i%3 == 0 {
					time.Sleep(100 * time.Microsecond)
				}
				inFlight[c][kind].Add(-1)
				release()
			}
		}()
	}
	wg.Wait()
	if n := over.Load(); n > 0 {
		t.Fatalf("%d times a cluster had more than %d requests of a kind in flight", n, limit)
	}
	wantNoState(t, l)
}

func TestValidate(t *testing.T) {
	if errs := DefaultConfig().Validate(); len(errs) > 0 {
		t.Fatalf("defaults: %v", errs)
	}
	if _, err := New(Config{MaxRequests: -1, MaxQueued: 1}); err == nil ||
		!strings.Contains(err.Error(), "--max-requests-per-cluster must not be negative") ||
		!strings.Contains(err.Error(), "--queue-wait-timeout must be positive") {
		t.Fatalf("New with invalid options: %v", err)
	}
	if _, err := New(Config{MaxStreams: 10, MaxStreamsPerUser: 11}); err == nil || !strings.Contains(err.Error(), "--max-streams-per-user-per-cluster (11) must not be more than --max-streams-per-cluster (10)") {
		t.Fatalf("a per-user share above the cluster's streams: %v", err)
	}
}

// One caller who keeps a cluster's queue full does not lock the others out:
// another caller's request pushes out the newest of hers (refused, as it
// would have been had it come last) and queues, and is granted after at most
// one more of hers. A caller with as many waiting as the others, or one
// fewer, still finds the queue full.
func TestOneCallerCannotFillTheQueueForOthers(t *testing.T) {
	l := newLimiter(t, 1, 1, 4, time.Hour)
	held := mustAcquire(t, l, "c", "alice", Request)
	var alice []*pending
	for range 4 {
		alice = append(alice, acquireAsync(context.Background(), l, "c", "alice", Request))
		waitFor(t, l, "alice's request queued", func(s Stats) bool { return s.Queued[Request] == len(alice) })
	}
	// Her own next request finds the queue full.
	if _, err := l.Acquire(context.Background(), slotsOf(l, "c"), "alice", Request); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("alice's fifth request to a full queue: %v, want 429", err)
	}

	bob := acquireAsync(context.Background(), l, "c", "bob", Request)
	select {
	case err := <-bob.done:
		t.Fatalf("bob's one request, with only alice waiting: %v, want it queued", err)
	case err := <-alice[3].done:
		if !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "--max-queued-per-cluster") {
			t.Fatalf("alice's newest request: %v, want it pushed out with a queue-full 429", err)
		}
	}
	waitFor(t, l, "bob queued in its place", func(s Stats) bool {
		return s.Queued[Request] == 4 && s.Refused[Request][reasonQueueFull] == 2
	})
	// Alice's turn comes first (she queued first), then bob's.
	held()
	<-alice[0].admit
	select {
	case err := <-bob.done:
		t.Fatalf("bob: %v", err)
	case <-bob.admit:
		t.Fatal("bob was granted a slot that alice's turn had")
	default:
	}
	close(alice[0].free)
	<-bob.admit
	// Now bob has none waiting and alice two: a third caller pushes out one of hers...
	carol := acquireAsync(context.Background(), l, "c", "carol", Request)
	waitFor(t, l, "carol queued", func(s Stats) bool { return s.Queued[Request] == 3 })
	// ...but with the queue full again and alice at two, carol's second is
	// not worth one of alice's (carol would hold as many as alice).
	dave := acquireAsync(context.Background(), l, "c", "dave", Request)
	waitFor(t, l, "dave queued", func(s Stats) bool { return s.Queued[Request] == 4 })
	if _, err := l.Acquire(context.Background(), slotsOf(l, "c"), "carol", Request); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("carol's second request, with alice at two queued: %v, want 429", err)
	}

	close(bob.free)
	for _, p := range []*pending{alice[1], carol, dave, alice[2]} { // in turns
		<-p.admit
		close(p.free)
	}
	for _, p := range []*pending{alice[0], bob, alice[1], alice[2], carol, dave} {
		if err := <-p.done; err != nil {
			t.Fatal(err)
		}
	}
	wantNoState(t, l)
}

// One user cannot hold every stream slot of a cluster (idle watches hold
// theirs for hours): beyond its share, held or waiting, its next stream is
// refused at once, naming the flag, while another user's stream is granted.
// Ordinary requests have no per-user bound. A stream given back, or a wait
// that ends, frees a place in the share.
func TestOneUserCannotHoldEveryStream(t *testing.T) {
	l, err := New(Config{MaxRequests: 4, MaxStreams: 3, MaxStreamsPerUser: 2, MaxQueued: 2, QueueWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	a1 := mustAcquire(t, l, "c", "mallory", Stream)
	a2 := mustAcquire(t, l, "c", "mallory", Stream)
	_, err = l.Acquire(context.Background(), slotsOf(l, "c"), "mallory", Stream)
	if !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "--max-streams-per-user-per-cluster") {
		t.Fatalf("mallory's third stream: %v, want 429 naming --max-streams-per-user-per-cluster", err)
	}
	if s := l.Stats(); s.Refused[Stream][reasonUserShare] != 1 || s.Queued[Stream] != 0 {
		t.Fatalf("stats after the refusal: %+v", s)
	}
	bob := mustAcquire(t, l, "c", "bob", Stream)
	// The cluster is full now: a waiting stream counts against the share too.
	ctx, cancel := context.WithCancel(context.Background())
	carol := acquireAsync(ctx, l, "c", "carol", Stream)
	carol2 := acquireAsync(ctx, l, "c", "carol", Stream)
	waitFor(t, l, "carol's two streams queued", func(s Stats) bool { return s.Queued[Stream] == 2 })
	if _, err := l.Acquire(context.Background(), slotsOf(l, "c"), "carol", Stream); !apierrors.IsTooManyRequests(err) ||
		!strings.Contains(err.Error(), "--max-streams-per-user-per-cluster") {
		t.Fatalf("carol's third stream with two waiting: %v, want the per-user 429", err)
	}
	cancel()
	for _, p := range []*pending{carol, carol2} {
		if err := <-p.done; !errors.Is(err, context.Canceled) {
			t.Fatalf("carol's canceled wait: %v", err)
		}
	}
	// Ordinary requests are not bounded per user.
	var reqs []func()
	for range 4 {
		reqs = append(reqs, mustAcquire(t, l, "c", "mallory", Request))
	}
	a1()
	a3 := mustAcquire(t, l, "c", "mallory", Stream) // a place in her share again
	for _, r := range append(reqs, a2, a3, bob) {
		r()
	}
	wantNoState(t, l)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range slotsOfAll(l) {
		if len(c.lanes[Stream].claims) != 0 {
			t.Fatalf("claims left behind: %+v", c.lanes[Stream].claims)
		}
	}
}
