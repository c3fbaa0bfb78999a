package clustergateway

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/health"
)

// Reachability is what the prober knows of the clusters (pkg/health).
type Reachability interface {
	Get(name string) (health.Result, bool)
	Subscribe() *health.Subscription
}

// withReachability adds the prober's view to gw (a copy the caller owns):
// the Reachable condition and the last probe's details.
func (r *REST) withReachability(gw *v1alpha1.ClusterGateway) *v1alpha1.ClusterGateway {
	if r.health == nil {
		return gw
	}
	res, ok := r.health.Get(gw.Name)
	if !ok {
		res = health.Result{Status: metav1.ConditionUnknown, Reason: v1alpha1.ReasonNotProbed, Message: "this gateway replica has not probed the cluster yet"}
	}
	meta.SetStatusCondition(&gw.Status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionReachable, Status: res.Status, Reason: res.Reason, Message: res.Message,
		LastTransitionTime: metav1.NewTime(res.LastTransitionTime), ObservedGeneration: gw.Generation,
	})
	if !res.LastProbeTime.IsZero() {
		st := &v1alpha1.ReachabilityStatus{ServerVersion: res.ServerVersion}
		t := metav1.NewTime(res.LastProbeTime)
		st.LastProbeTime = &t
		if res.Latency > 0 {
			st.Latency = &metav1.Duration{Duration: res.Latency.Round(100 * 1000)}
		}
		for _, a := range res.Addresses {
			t := metav1.NewTime(a.LastProbeTime)
			st.Addresses = append(st.Addresses, v1alpha1.AddressReachability{
				Address: a.Address, Reachable: a.Reason == v1alpha1.ReasonReachable, Reason: a.Reason, Message: a.Message, LastProbeTime: &t})
		}
		gw.Status.Reachability = st
	}
	return gw
}

// reachabilityWatch adds the prober's view to the store's watch, and a
// MODIFIED event whenever a watched gateway's Reachable status changes. The
// event carries the object this watch last sent for it (same
// resourceVersion: the stored object did not change), so a client's view of
// each object's resourceVersion never goes back.
type reachabilityWatch struct {
	r        *REST
	upstream watch.Interface
	sub      *health.Subscription
	result   chan watch.Event
	stop     chan struct{}
	stopOnce sync.Once
	sent     map[string]*v1alpha1.ClusterGateway // undecorated, by name
}

func (r *REST) watchReachability(upstream watch.Interface, seed []*v1alpha1.ClusterGateway) watch.Interface {
	if r.health == nil {
		return upstream
	}
	w := &reachabilityWatch{r: r, upstream: upstream, sub: r.health.Subscribe(), result: make(chan watch.Event), stop: make(chan struct{}), sent: map[string]*v1alpha1.ClusterGateway{}}
	for _, gw := range seed {
		w.sent[gw.Name] = gw
	}
	go w.run()
	return w
}

func (w *reachabilityWatch) ResultChan() <-chan watch.Event { return w.result }

func (w *reachabilityWatch) Stop() {
	w.stopOnce.Do(func() {
		close(w.stop)
		w.upstream.Stop()
	})
}

func (w *reachabilityWatch) run() {
	defer close(w.result)
	defer w.sub.Close()
	for {
		select {
		case <-w.stop:
			return
		case ev, ok := <-w.upstream.ResultChan():
			if !ok {
				return
			}
			if gw, isGW := ev.Object.(*v1alpha1.ClusterGateway); isGW && ev.Type != watch.Bookmark && ev.Type != watch.Error {
				if ev.Type == watch.Deleted {
					delete(w.sent, gw.Name)
				} else {
					w.sent[gw.Name] = gw
				}
				ev.Object = w.r.withReachability(gw.DeepCopy())
			}
			if !w.send(ev) {
				return
			}
		case <-w.sub.Changed():
			for _, name := range w.sub.Take() {
				if gw, ok := w.sent[name]; ok {
					if !w.send(watch.Event{Type: watch.Modified, Object: w.r.withReachability(gw.DeepCopy())}) {
						return
					}
				}
			}
		}
	}
}

func (w *reachabilityWatch) send(ev watch.Event) bool {
	select {
	case w.result <- ev:
		return true
	case <-w.stop:
		return false
	}
}
