package v1alpha1

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Each additional address is validated like address, and no address names
// an API server (host and port, as dialed) that another one names.
func TestAdditionalAddresses(t *testing.T) {
	withMore := func(more ...string) *ClusterGateway {
		gw := tokenGateway(EndpointDirect, "https://10.0.0.1:6443", "")
		gw.Spec.Endpoint.AdditionalAddresses = more
		return gw
	}
	if errs := ValidateClusterGateway(withMore("https://10.0.0.2:6443", "https://cp-3.example:6443")); len(errs) > 0 {
		t.Fatalf("two distinct https addresses: %v", errs)
	}
	for _, tc := range []struct {
		more      []string
		field     string
		errorType field.ErrorType
	}{
		{[]string{"http://10.0.0.2:6443"}, "spec.endpoint.additionalAddresses[0]", field.ErrorTypeInvalid},
		{[]string{"https://10.0.0.2:6443", "https://127.1:6443"}, "spec.endpoint.additionalAddresses[1]", field.ErrorTypeInvalid},
		{[]string{"https://u:p@10.0.0.2:6443"}, "spec.endpoint.additionalAddresses[0]", field.ErrorTypeInvalid},
		{[]string{"https://10.0.0.1:6443/other-path"}, "spec.endpoint.additionalAddresses[0]", field.ErrorTypeDuplicate},
		{[]string{"https://a.example", "https://A.example:443"}, "spec.endpoint.additionalAddresses[1]", field.ErrorTypeDuplicate},
	} {
		errs := ValidateClusterGateway(withMore(tc.more...))
		if len(errs) != 1 || errs[0].Field != tc.field || errs[0].Type != tc.errorType {
			t.Errorf("%v: %v, want one %s error on %s", tc.more, errs, tc.errorType, tc.field)
		}
	}
	var many []string
	for i := range MaxAdditionalAddresses + 1 {
		many = append(many, fmt.Sprintf("https://10.0.1.%d:6443", i))
	}
	if errs := ValidateClusterGateway(withMore(many...)); len(errs) != 1 || errs[0].Type != field.ErrorTypeTooMany {
		t.Errorf("%d additional addresses: %v, want one TooMany error", len(many), errs)
	}
}
