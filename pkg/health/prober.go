// Package health probes every ClusterGateway's cluster through the gateway's
// own transport and keeps the result in memory, in the cluster's record
// (pkg/clusters): the Reachable condition the API shows, and what lets the
// proxy fail fast for a cluster known to be down.
// A bounded set of workers takes clusters from one delaying queue (no
// goroutine per cluster), with jitter, and backs off from clusters that keep
// failing. Nothing is written to the hub per probe.
package health

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// Outcome is what one probe found.
type Outcome struct {
	// Reason is v1alpha1.ReasonReachable when the cluster answered /readyz
	// with 200, else why not (ReasonDialFailed, ReasonTLSFailed,
	// ReasonHTTPError, ReasonNoAnswer), or ReasonGatewayNotReady when the
	// stored gateway cannot be used (nothing was sent).
	Reason        string
	Message       string
	Latency       time.Duration
	ServerVersion string
	// Addresses has what the probe found at each address of a gateway
	// with more than one (address first); Reason is Reachable when any is.
	Addresses []AddressOutcome
}

// AddressOutcome is what one probe found at one of a cluster's addresses.
type AddressOutcome struct {
	Address         string
	Reason, Message string
	// Code is the HTTP status it answered /readyz with (0: no answer), and
	// Latency how long that answer took.
	Code    int
	Latency time.Duration
}

// ProbeFunc probes the named cluster within ctx.
type ProbeFunc func(ctx context.Context, name string) Outcome

// Result is what the prober knows of a cluster: the Reachable condition and
// the last probe.
type Result struct {
	Status             metav1.ConditionStatus
	Reason, Message    string
	LastTransitionTime time.Time
	LastProbeTime      time.Time
	// LastSuccessTime is the last probe the cluster answered with 200 (zero:
	// none since the gateway was created). It outlives a change of the
	// gateway, as it says how long the cluster has been out of reach.
	LastSuccessTime time.Time
	Latency         time.Duration
	ServerVersion   string
	// Addresses are each address's last probe (a gateway with more than one).
	Addresses []AddressResult
}

// AddressResult is the last probe of one of a cluster's addresses.
type AddressResult struct {
	AddressOutcome
	LastProbeTime time.Time
}

// Prober probes the clusters whose records (pkg/clusters) hold a probe
// state. It keeps no state of a cluster itself: it reads and updates the
// record's. Run runs it.
type Prober struct {
	opts    Config
	probe   ProbeFunc
	records Records
	queue   workqueue.TypedDelayingInterface[string]
	metrics *Metrics
	now     func() time.Time

	mu      sync.RWMutex
	watches map[*Subscription]struct{}
}

// Records are where the clusters' probe states live: one per cluster's
// record (pkg/clusters' Owner).
type Records interface {
	// ProbeState is the named cluster's probe state; nil when the cluster
	// has no record.
	ProbeState(name string) *State
	// EachProbeState calls fn with each record's probe state; fn must not
	// call back into the records.
	EachProbeState(fn func(*State))
	// OnProbe has the records call fn in a cluster's step: with reset
	// when its state is new or was started over (the prober tells its
	// subscribers and probes it at once), without when it should be probed
	// soon (a new token); and at once, with reset, for each record there
	// is.
	OnProbe(fn func(name string, reset bool))
}

// State is one cluster's probe state, kept in the cluster's record: made
// in its creation step, started over in a change step (Reset) and stopped
// in its deletion step (Stop). The prober updates it with each probe.
type State struct {
	mu      sync.Mutex
	s       state
	stopped bool
}

type state struct {
	result               Result
	successes, failures  int
	interval             time.Duration // until the next probe, backed off while failing; 0: not probed yet
	generation, probedAt uint64        // a probe's outcome counts only for the generation it started in
	addresses            int           // the gateway's addresses (address and additionalAddresses)
}

// NewState returns the probe state of a cluster reached through addresses
// addresses, not probed yet (Unknown).
func NewState(addresses int) *State {
	st := &State{}
	st.s = fresh(0, addresses, time.Time{})
	return st
}

// fresh is the state of generation gen: Unknown, not probed; the last
// success is kept, as it says how long the cluster has been out of reach.
func fresh(gen uint64, addresses int, lastSuccess time.Time) state {
	return state{generation: gen, addresses: addresses, result: Result{
		Status: metav1.ConditionUnknown, Reason: v1alpha1.ReasonNotProbed,
		Message: "the cluster has not been probed since the gateway was created or changed", LastTransitionTime: time.Now(),
		LastSuccessTime: lastSuccess,
	}}
}

// Reset starts the state over as Unknown (its gateway changed, now with
// addresses addresses): a probe that started before counts no more.
func (st *State) Reset(addresses int) {
	st.mu.Lock()
	st.s = fresh(st.s.generation+1, addresses, st.s.result.LastSuccessTime)
	st.mu.Unlock()
}

// Stop ends the state (its gateway is deleted): no probe updates it after.
func (st *State) Stop() {
	st.mu.Lock()
	st.stopped = true
	st.mu.Unlock()
}

// Result is what the state knows of the cluster.
func (st *State) Result() Result {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.s.result
}

// New returns a prober that probes with probe the clusters of records: it
// follows them (Records.OnProbe) from here on.
func New(opts Config, records Records, probe ProbeFunc) (*Prober, error) {
	if err := errors.Join(opts.Validate()...); err != nil {
		return nil, fmt.Errorf("health: %w", err)
	}
	if records == nil {
		return nil, fmt.Errorf("health: the prober needs the clusters' records")
	}
	p := &Prober{
		opts:    opts,
		probe:   probe,
		records: records,
		queue:   workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: "cluster_gateway_probes"}),
		now:     time.Now,
		watches: map[*Subscription]struct{}{},
	}
	p.metrics = newMetrics(p)
	records.OnProbe(p.told)
	return p, nil
}

// told is what a cluster's step tells the prober: probe it now, after
// telling subscribers of a state started over.
func (p *Prober) told(name string, reset bool) {
	if reset {
		p.notify(name)
	}
	p.queue.Add(name)
}

// Interval is how often a reachable cluster is probed.
func (p *Prober) Interval() time.Duration { return p.opts.Interval }

// Metrics are the prober's metrics, to register with the server's registry.
func (p *Prober) Metrics() *Metrics { return p.metrics }

// Run probes until ctx is done, with opts.Workers workers, and returns when
// they have stopped.
func (p *Prober) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for range p.opts.Workers {
		wg.Go(func() {
			for {
				name, shutdown := p.queue.Get()
				if shutdown {
					return
				}
				p.probeOne(ctx, name)
				p.queue.Done(name)
			}
		})
	}
	<-ctx.Done()
	p.queue.ShutDown()
	wg.Wait()
}

// Get returns what is known of the named cluster: its record's probe state.
func (p *Prober) Get(name string) (Result, bool) {
	st := p.records.ProbeState(name)
	if st == nil {
		return Result{}, false
	}
	return st.Result(), true
}

// ProbeNow probes the named cluster soon, e.g. after a proxied request failed
// to reach it: a cluster that just went down is noticed without waiting for
// its interval.
func (p *Prober) ProbeNow(name string) {
	if p.records.ProbeState(name) != nil {
		p.queue.Add(name)
	}
}

// probeOne probes a cluster, folds the outcome into its record's state and
// schedules the next probe.
func (p *Prober) probeOne(ctx context.Context, name string) {
	st := p.records.ProbeState(name)
	if st == nil {
		return // deleted meanwhile: no more probes
	}
	st.mu.Lock()
	gen, stopped := st.s.generation, st.stopped
	st.mu.Unlock()
	if stopped {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	start := p.now()
	out := p.probe(pctx, name)
	cancel()
	if ctx.Err() != nil {
		return // stopping: the outcome says nothing about the cluster
	}
	p.metrics.observe(out, p.now().Sub(start))

	st.mu.Lock()
	if st.stopped || st.s.generation != gen {
		st.mu.Unlock()
		return // deleted or changed while probing: its step has scheduled a fresh probe
	}
	if st.s.interval == 0 {
		st.s.interval = p.opts.Interval
	}
	changed := p.fold(&st.s, out)
	next := st.s.interval
	st.mu.Unlock()
	if changed {
		p.notify(name)
	}
	// ±10% jitter, so clusters added together are not probed in lockstep.
	p.queue.AddAfter(name, time.Duration(float64(next)*(0.9+0.2*rand.Float64())))
}

// fold applies an outcome to a state under its lock and says whether the
// condition's status changed.
func (p *Prober) fold(st *state, out Outcome) bool {
	r := &st.result
	r.LastProbeTime = p.now()
	r.Addresses = nil // a new slice: readers hold copies of the old one
	for _, a := range out.Addresses {
		r.Addresses = append(r.Addresses, AddressResult{AddressOutcome: a, LastProbeTime: r.LastProbeTime})
	}
	before := r.Status
	switch out.Reason {
	case v1alpha1.ReasonReachable:
		st.successes++
		st.failures = 0
		st.interval = p.opts.Interval
		r.LastSuccessTime = r.LastProbeTime
		r.Latency, r.ServerVersion = out.Latency, out.ServerVersion
		if r.Status == metav1.ConditionTrue || r.Status == metav1.ConditionUnknown || st.successes >= p.opts.SuccessThreshold {
			r.Status, r.Reason, r.Message = metav1.ConditionTrue, out.Reason, out.Message
		}
	case v1alpha1.ReasonGatewayNotReady:
		st.successes, st.failures = 0, 0
		st.interval = p.opts.MaxBackoff // nothing to probe until the gateway changes
		r.Status, r.Reason, r.Message = metav1.ConditionUnknown, out.Reason, out.Message
	default:
		st.failures++
		st.successes = 0
		if st.failures >= p.opts.FailureThreshold {
			r.Status, r.Reason, r.Message = metav1.ConditionFalse, out.Reason, out.Message
			st.interval = min(2*st.interval, p.opts.MaxBackoff)
		} else if r.Status == metav1.ConditionUnknown {
			r.Reason, r.Message = out.Reason, out.Message // still deciding: say why
		}
	}
	if r.Status != before {
		r.LastTransitionTime = r.LastProbeTime
		return true
	}
	return false
}
