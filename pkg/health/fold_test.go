package health

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

func fastConfig() Config {
	return Config{Interval: 5 * time.Millisecond, Timeout: time.Second, FailureThreshold: 2, SuccessThreshold: 2, MaxBackoff: 20 * time.Millisecond, Workers: 2}
}

// FastConfig is fastConfig for the tests outside the package (they
// build the prober over the clusters' records, which import it).
var FastConfig = fastConfig

// fold's thresholds and backoff, step by step.
func TestFold(t *testing.T) {
	p := &Prober{opts: Config{Interval: time.Second, FailureThreshold: 3, SuccessThreshold: 2, MaxBackoff: 5 * time.Second}, now: time.Now}
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

// Each probe's per-address outcomes replace the last ones, stamped with the
// probe's time; the condition follows the cluster's outcome.
func TestFoldKeepsEachAddress(t *testing.T) {
	p := &Prober{opts: fastConfig(), now: time.Now}
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
