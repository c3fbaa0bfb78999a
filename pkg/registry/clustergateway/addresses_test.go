package clustergateway

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clustergateway/cluster-gateway/internal/testgateways"
	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/endpointpolicy"
	"github.com/clustergateway/cluster-gateway/pkg/health"
)

// The endpoint policy judges each additional address as it judges address.
func TestEndpointPolicyJudgesAdditionalAddresses(t *testing.T) {
	policy, err := endpointpolicy.DefaultConfig().Policy()
	if err != nil {
		t.Fatal(err)
	}
	r := &REST{policy: policy}
	gw := testgateways.TokenGateway("t")
	gw.Spec.Endpoint.AdditionalAddresses = []string{"https://127.0.0.4:6443", "https://169.254.169.254:443"}
	errs := r.validateWrite(gw, gw.Spec.Credential)
	if len(errs) != 1 || errs[0].Field != "spec.endpoint.additionalAddresses[1]" {
		t.Fatalf("a link-local additional address: %v, want one error on spec.endpoint.additionalAddresses[1]", errs)
	}
	gw.Spec.Endpoint.AdditionalAddresses = gw.Spec.Endpoint.AdditionalAddresses[:1]
	if errs := r.validateWrite(gw, v1alpha1.Credential{}); len(errs) > 0 {
		t.Fatalf("a loopback additional address: %v", errs)
	}
}

// fixedReachability is a prober that knows one result for every cluster.
type fixedReachability struct{ res health.Result }

func (f fixedReachability) Get(string) (health.Result, bool) { return f.res, true }
func (f fixedReachability) Subscribe() *health.Subscription  { return nil }

// The status shows each address's last probe, and the cluster is Reachable
// as the prober says (while any address is).
func TestStatusShowsEachAddress(t *testing.T) {
	now := time.Now()
	res := health.Result{Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonReachable, LastProbeTime: now, Addresses: []health.AddressResult{
		{AddressOutcome: health.AddressOutcome{Address: "https://127.0.0.2:6443", Reason: v1alpha1.ReasonReachable}, LastProbeTime: now},
		{AddressOutcome: health.AddressOutcome{Address: "https://127.0.0.3:6443", Reason: v1alpha1.ReasonDialFailed, Message: "refused"}, LastProbeTime: now},
	}}
	gw := (&REST{health: fixedReachability{res}}).withReachability(testgateways.TokenGateway("t"))
	st := gw.Status.Reachability
	if st == nil || len(st.Addresses) != 2 {
		t.Fatalf("status.reachability %+v, want two addresses", st)
	}
	if a := st.Addresses[0]; !a.Reachable || a.Address != "https://127.0.0.2:6443" || a.LastProbeTime == nil {
		t.Errorf("first address %+v, want reachable", a)
	}
	if a := st.Addresses[1]; a.Reachable || a.Reason != v1alpha1.ReasonDialFailed || a.Message != "refused" {
		t.Errorf("second address %+v, want DialFailed: refused", a)
	}
}
