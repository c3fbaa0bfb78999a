package gateways

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/clustergateway/cluster-gateway/pkg/credentials"
)

// The Cache runs an informer: every test must stop every goroutine it starts.
func TestMain(m *testing.M) {
	credentials.RunLauncherIfAsked() // Provider gateways' providers run through this binary
	goleak.VerifyTestMain(m)
}
