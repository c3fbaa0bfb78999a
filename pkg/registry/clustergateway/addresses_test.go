package clustergateway

import (
	"testing"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/endpointpolicy"
)

// The endpoint policy judges each additional address as it judges address.
func TestEndpointPolicyJudgesAdditionalAddresses(t *testing.T) {
	policy, err := endpointpolicy.NewOptions().Policy()
	if err != nil {
		t.Fatal(err)
	}
	r := &REST{policy: policy}
	gw := tokenGateway("t")
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
