package inventory

import (
	"strings"
	"testing"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
)

func TestGatewayName(t *testing.T) {
	if got := GatewayName("fleet", "prod-eu"); got != "fleet-prod-eu" {
		t.Errorf("GatewayName(fleet, prod-eu) = %q, want fleet-prod-eu", got)
	}
	long := strings.Repeat("a", 250)
	a, b := GatewayName("ns", long), GatewayName("ns", long+"b")
	for _, n := range []string{a, b} {
		if msgs := apivalidation.NameIsDNSSubdomain(n, false); len(msgs) > 0 {
			t.Errorf("GatewayName of a long name = %q (%d chars): not a Secret name: %v", n, len(n), msgs)
		}
	}
	if a == b {
		t.Errorf("two long names that share their start map to one gateway name %q", a)
	}
	if GatewayName("ns", long) != a {
		t.Error("GatewayName is not deterministic")
	}
}
