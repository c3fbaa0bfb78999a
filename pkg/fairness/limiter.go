package fairness

import (
	"container/list"
	"context"
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// Kind is what a request counts against: each has its own slots and queue.
type Kind int

const (
	Request Kind = iota // ordinary: held to the request timeout
	Stream              // long-running: watch, logs -f, exec, attach, port-forward
	numKinds
)

// Kinds are the kinds, in label order.
var Kinds = [numKinds]Kind{Request, Stream}

func (k Kind) String() string {
	if k == Stream {
		return "stream"
	}
	return "request"
}

// MinRetryAfterSeconds is the least Retry-After of a refusal (the generic
// server's max-in-flight filter always gives 1): client-go waits as long as
// Retry-After says and retries. A slow cluster's refusals say more, so that
// its clients do not come back before a slot can be free.
const MinRetryAfterSeconds = 1

// Limiter bounds each cluster's requests with the cluster's Slots, which
// the cluster's record keeps (pkg/clusters): the Limiter keeps no state of
// a cluster itself, only totals. It starts no goroutine.
type Limiter struct {
	opts    Config
	metrics *Metrics
	clock   clock.Clock

	// mu guards every Slots of this limiter, and the totals.
	mu      sync.Mutex
	total   totals
	refused [numKinds][numReasons]int64
	waited  [numKinds]int64
}

// totals are the Stats of all Slots, kept as they change (Stats costs no
// walk over the clusters).
type totals struct {
	inFlight, queued, saturated [numKinds]int
	busy                        int // Slots with a request in flight or queued
}

// New returns a limiter; it refuses a Config that Validate refuses.
func New(opts Config) (*Limiter, error) {
	return newWithClock(opts, clock.RealClock{})
}

func newWithClock(opts Config, clk clock.Clock) (*Limiter, error) {
	if errs := opts.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("fairness: %v", errs)
	}
	l := &Limiter{opts: opts, clock: clk}
	l.metrics = newMetrics(l)
	return l, nil
}

// Metrics are the limiter's metrics, to register with the server's registry.
func (l *Limiter) Metrics() *Metrics { return l.metrics }

func (l *Limiter) limit(k Kind) int {
	if k == Stream {
		return l.opts.MaxStreams
	}
	return l.opts.MaxRequests
}

// perUser is the most slots of kind one caller may hold or wait for; 0: no
// bound. Only streams have one: an ordinary request gives its slot back
// by its deadline, and the turns share the freed slots among callers.
func (l *Limiter) perUser(k Kind) int {
	if k == Stream {
		return l.opts.MaxStreamsPerUser
	}
	return 0
}

// Slots are one cluster's slots and queues, one lane per kind. Its record
// makes them (NewSlots) in the cluster's creation step and drops them with
// the record; requests that hold or wait for a slot keep theirs until they
// end.
type Slots struct {
	cluster string
	lanes   [numKinds]lane
}

// NewSlots returns the slots of the named cluster, all free.
func (l *Limiter) NewSlots(cluster string) *Slots {
	return &Slots{cluster: cluster}
}

func (c *Slots) idle() bool {
	for i := range c.lanes {
		if c.lanes[i].inFlight > 0 || c.lanes[i].queued > 0 {
			return false
		}
	}
	return true
}

// lane is one kind's slots and queue for one cluster. The queue holds one
// FIFO per caller; the callers with waiters take turns (round-robin), so a
// caller with a hundred queued requests delays another's by one at most.
type lane struct {
	inFlight int
	queued   int
	refusing bool          // since the first refusal of a saturation, until the queue empties
	hold     time.Duration // moving average of how long a slot is held, for Retry-After
	turns    list.List     // of *callerQueue with waiters, next turn first
	callers  map[string]*callerQueue
	// claims counts the slots each caller holds or waits for, when the
	// kind has a per-caller bound (perUser); nil otherwise.
	claims map[string]int
}

func (ln *lane) claim(caller string) {
	if ln.claims == nil {
		ln.claims = map[string]int{}
	}
	ln.claims[caller]++
}

func (ln *lane) unclaim(caller string) {
	if n := ln.claims[caller]; n > 1 {
		ln.claims[caller] = n - 1
	} else {
		delete(ln.claims, caller)
	}
}

type callerQueue struct {
	name    string
	waiters list.List // of *waiter, oldest first
	turn    *list.Element
}

type waiter struct {
	ready   chan struct{} // closed when granted, or when pushed out
	granted bool
	// pushedOut: refused after all, to make room in a full queue for the
	// request of a caller with fewer waiting (see makeRoomFor); queued and
	// retry are that refusal's figures.
	pushedOut     bool
	queued, retry int
	q             *callerQueue
	elem          *list.Element
}

func (ln *lane) enqueue(caller string) *waiter {
	if ln.callers == nil {
		ln.callers = map[string]*callerQueue{}
	}
	q := ln.callers[caller]
	if q == nil {
		q = &callerQueue{name: caller}
		q.turn = ln.turns.PushBack(q)
		ln.callers[caller] = q
	}
	w := &waiter{ready: make(chan struct{}), q: q}
	w.elem = q.waiters.PushBack(w)
	ln.queued++
	return w
}

// remove takes a waiter out of the queue, and its caller out of the turns
// when it has no other.
func (ln *lane) remove(w *waiter) {
	q := w.q
	q.waiters.Remove(w.elem)
	ln.queued--
	if q.waiters.Len() == 0 {
		ln.turns.Remove(q.turn)
		delete(ln.callers, q.name)
	}
}

// makeRoomFor makes room in a full queue for a request of caller when
// another caller has at least two more waiting than caller: that caller's
// newest waiter is pushed out (refused with queue_full, as it would have been
// had the two arrived the other way round). Without it, one caller who keeps
// the queue full would have every other caller refused at once. It returns
// the waiter pushed out, or nil when the queue stays as it is.
func (ln *lane) makeRoomFor(caller string) *waiter {
	mine := 0
	if q := ln.callers[caller]; q != nil {
		mine = q.waiters.Len()
	}
	var longest *callerQueue
	for e := ln.turns.Front(); e != nil; e = e.Next() {
		q := e.Value.(*callerQueue)
		if q.name != caller && q.waiters.Len() > mine+1 && (longest == nil || q.waiters.Len() > longest.waiters.Len()) {
			longest = q
		}
	}
	if longest == nil {
		return nil
	}
	w := longest.waiters.Back().Value.(*waiter)
	ln.remove(w)
	w.pushedOut = true
	return w
}

// dispatch grants free slots to waiters, one per caller in turn.
func (ln *lane) dispatch(limit int) {
	for ln.inFlight < limit && ln.queued > 0 {
		q := ln.turns.Front().Value.(*callerQueue)
		w := q.waiters.Front().Value.(*waiter)
		ln.remove(w)
		if q.waiters.Len() > 0 {
			ln.turns.MoveToBack(q.turn) // its next request waits for the others' turns
		}
		w.granted = true
		ln.inFlight++
		close(w.ready)
	}
}

// tally adds (sign 1) or takes out (sign -1) what c counts in the totals;
// a change of c is between a tally(c, -1) and a tally(c, 1), under l.mu.
func (l *Limiter) tally(c *Slots, sign int) {
	if c.idle() {
		return
	}
	l.total.busy += sign
	for _, k := range Kinds {
		ln := &c.lanes[k]
		l.total.inFlight[k] += sign * ln.inFlight
		l.total.queued[k] += sign * ln.queued
		if limit := l.limit(k); limit > 0 && ln.inFlight >= limit {
			l.total.saturated[k] += sign
		}
	}
}

// Acquire takes a slot of kind of c, a cluster's Slots, on behalf of caller
// (the hub user name), waiting in the cluster's queue if every slot is
// taken. It returns the func that gives the slot back (call it once the
// request is over), or a 429 Status error with Retry-After when the queue is
// full or the wait ran out, or ctx's error when ctx ended first. A nil
// Limiter, or nil Slots (a cluster without a record), bound nothing.
func (l *Limiter) Acquire(ctx context.Context, c *Slots, caller string, kind Kind) (release func(), err error) {
	if l == nil || c == nil || l.limit(kind) == 0 {
		return func() {}, nil
	}
	cluster := c.cluster
	limit, share := l.limit(kind), l.perUser(kind)
	l.mu.Lock()
	ln := &c.lanes[kind]
	if share > 0 && ln.claims[caller] >= share {
		l.refused[kind][reasonUserShare]++
		l.mu.Unlock()
		return nil, l.userShareRefusal(cluster, caller, kind, share)
	}
	l.tally(c, -1)
	if ln.inFlight < limit && ln.queued == 0 {
		ln.inFlight++
		if share > 0 {
			ln.claim(caller)
		}
		l.tally(c, 1)
		l.mu.Unlock()
		return l.releaser(caller, c, kind), nil
	}
	var firstOut *waiter // pushed out as the saturation's first refusal, to log
	if ln.queued >= l.opts.MaxQueued {
		out := ln.makeRoomFor(caller)
		if out == nil {
			l.refused[kind][reasonQueueFull]++
			queued, retry, first := ln.queued, l.retryAfter(ln, limit), !ln.refusing
			ln.refusing = true
			l.tally(c, 1)
			l.mu.Unlock()
			err := l.refusal(cluster, kind, reasonQueueFull, queued, retry)
			if first {
				logSaturated(cluster, kind, err)
			}
			return nil, err
		}
		if share > 0 {
			ln.unclaim(out.q.name)
		}
		l.refused[kind][reasonQueueFull]++ // out's
		out.queued, out.retry = ln.queued+1, l.retryAfter(ln, limit)
		if !ln.refusing {
			firstOut = out
		}
		ln.refusing = true
		close(out.ready)
	}
	w := ln.enqueue(caller)
	if share > 0 {
		ln.claim(caller)
	}
	l.tally(c, 1)
	l.mu.Unlock()
	if firstOut != nil {
		logSaturated(cluster, kind, l.refusal(cluster, kind, reasonQueueFull, firstOut.queued, firstOut.retry))
	}

	start := l.clock.Now()
	timer := l.clock.NewTimer(l.opts.QueueWait)
	defer timer.Stop()
	ended := reasonTimeout
	select {
	case <-w.ready:
		l.noteWait(kind, start)
		if w.pushedOut { // set before ready was closed
			return nil, l.refusal(cluster, kind, reasonQueueFull, w.queued, w.retry)
		}
		return l.releaser(caller, c, kind), nil
	case <-timer.C():
	case <-ctx.Done():
		ended = reasonCanceled
	}
	l.mu.Lock()
	if w.pushedOut { // just as the wait ended: already out of the queue, and counted
		l.mu.Unlock()
		l.noteWait(kind, start)
		return nil, l.refusal(cluster, kind, reasonQueueFull, w.queued, w.retry)
	}
	if w.granted {
		// Granted just as the wait ended: the slot is this request's.
		l.mu.Unlock()
		l.noteWait(kind, start)
		release := l.releaser(caller, c, kind)
		if ended == reasonCanceled {
			release()
			return nil, context.Cause(ctx)
		}
		return release, nil
	}
	l.tally(c, -1)
	ln.remove(w)
	if share > 0 {
		ln.unclaim(caller)
	}
	l.tally(c, 1)
	l.refused[kind][ended]++
	queued, retry, first := ln.queued, l.retryAfter(ln, limit), !ln.refusing && ended == reasonTimeout
	ln.refusing = ln.refusing || ended == reasonTimeout
	l.mu.Unlock()
	l.noteWait(kind, start)
	if ended == reasonCanceled {
		return nil, fmt.Errorf("waiting for a slot of cluster %q: %w", cluster, context.Cause(ctx))
	}
	err = l.refusal(cluster, kind, reasonTimeout, queued, retry)
	if first {
		logSaturated(cluster, kind, err)
	}
	return nil, err
}

// logSaturated logs the first refusal of a saturation: once per episode,
// not per request, so a storm of 429s does not flood the log.
func logSaturated(cluster string, kind Kind, err error) {
	klog.InfoS("Cluster saturated: answering 429 until its queue empties", "cluster", cluster, "kind", kind, "first", err)
}

func (l *Limiter) noteWait(kind Kind, start time.Time) {
	l.mu.Lock()
	l.waited[kind]++
	l.mu.Unlock()
	l.metrics.observeWait(kind, l.clock.Since(start))
}

// retryAfter is how long, in whole seconds, the requests queued now would
// take to get a slot at the pace slots were given back so far: at least
// MinRetryAfterSeconds, at most the queue wait. Called with l.mu held.
func (l *Limiter) retryAfter(ln *lane, limit int) int {
	wait := time.Duration(ln.queued+1) * ln.hold / time.Duration(limit)
	return int(max(MinRetryAfterSeconds, min(math.Ceil(wait.Seconds()), math.Floor(l.opts.QueueWait.Seconds()))))
}

// releaser gives the slot back once, and hands it to the next waiter.
func (l *Limiter) releaser(caller string, c *Slots, kind Kind) func() {
	var once sync.Once
	granted := l.clock.Now()
	return func() {
		once.Do(func() {
			held := l.clock.Since(granted)
			l.mu.Lock()
			l.tally(c, -1)
			ln := &c.lanes[kind]
			if ln.hold == 0 {
				ln.hold = held
			} else {
				ln.hold += (held - ln.hold) / 8
			}
			ln.inFlight--
			if l.perUser(kind) > 0 {
				ln.unclaim(caller)
			}
			ln.dispatch(l.limit(kind))
			if ln.queued == 0 {
				ln.refusing = false
			}
			l.tally(c, 1)
			l.mu.Unlock()
		})
	}
}

// Why a request left a queue without a slot.
type reason int

const (
	reasonQueueFull reason = iota // refused at once: the queue was full
	reasonTimeout                 // waited --queue-wait-timeout
	reasonCanceled                // the request ended while waiting (client gone, request timeout)
	reasonUserShare               // refused at once: the caller holds or waits for its share (streams)
	numReasons
)

func (r reason) String() string {
	return [...]string{"queue_full", "timeout", "canceled", "user_share"}[r]
}

// refusal is the 429 a client sees: it names the cluster, the limit and the
// flag that sets it, with Retry-After.
func (l *Limiter) refusal(cluster string, kind Kind, r reason, queued, retryAfter int) error {
	what, flag := "ordinary requests", "--max-requests-per-cluster"
	if kind == Stream {
		what, flag = "long-running requests (watch, logs -f, exec, attach, port-forward)", "--max-streams-per-cluster"
	}
	var msg string
	switch r {
	case reasonQueueFull:
		msg = fmt.Sprintf("too many requests to cluster %q: its %d slots for %s are taken (the gateway's %s) and %d more are waiting (--max-queued-per-cluster); retry after %ds",
			cluster, l.limit(kind), what, flag, queued, retryAfter)
	default:
		msg = fmt.Sprintf("too many requests to cluster %q: waited %v (the gateway's --queue-wait-timeout) for one of its %d slots for %s (%s); retry after %ds",
			cluster, l.opts.QueueWait, l.limit(kind), what, flag, retryAfter)
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusTooManyRequests,
		Reason:  metav1.StatusReasonTooManyRequests,
		Message: msg,
		Details: &metav1.StatusDetails{
			Name: cluster, Group: v1alpha1.GroupName, Kind: "clustergateways",
			RetryAfterSeconds: int32(retryAfter),
		},
	}}
}

// userShareRefusal is the 429 of a caller who holds or waits for its share
// of a cluster's slots of kind.
func (l *Limiter) userShareRefusal(cluster, caller string, kind Kind, share int) error {
	retry := max(MinRetryAfterSeconds, int(l.opts.QueueWait.Seconds()))
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure,
		Code:   http.StatusTooManyRequests,
		Reason: metav1.StatusReasonTooManyRequests,
		Message: fmt.Sprintf("too many long-running requests (watch, logs -f, exec, attach, port-forward) of user %q to cluster %q: the user holds or waits for %d of its %d slots, the most one user may (the gateway's --max-streams-per-user-per-cluster); end some, or retry after %ds",
			caller, cluster, share, l.limit(kind), retry),
		Details: &metav1.StatusDetails{
			Name: cluster, Group: v1alpha1.GroupName, Kind: "clustergateways",
			RetryAfterSeconds: int32(retry),
		},
	}}
}

// Stats is a snapshot of the limiter (its metrics, see Metrics), by kind.
type Stats struct {
	InFlight  [numKinds]int // requests holding a slot
	Queued    [numKinds]int // requests waiting for one
	Saturated [numKinds]int // clusters with every slot of the kind taken
	Clusters  int           // clusters with a request in flight or queued
	// Refused counts requests that left a queue without a slot, by reason:
	// queue full, wait timed out, or canceled (the client or its deadline).
	Refused [numKinds][numReasons]int64
	Waited  [numKinds]int64 // requests that had to queue, whatever the outcome
}

// Stats returns a snapshot, from the totals kept as the Slots change.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Clusters: l.total.busy, InFlight: l.total.inFlight, Queued: l.total.queued, Saturated: l.total.saturated,
		Refused: l.refused, Waited: l.waited}
}
