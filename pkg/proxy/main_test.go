package proxy

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/clustergateway/cluster-gateway/pkg/credentials"
)

// The proxy drives pooled transports, an informer and upstream streams:
// every test must leave no goroutine behind.
func TestMain(m *testing.M) {
	credentials.RunLauncherIfAsked() // credential providers run through this binary
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { removeTestProvider() }))
}
