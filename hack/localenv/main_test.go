package localenv

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Stop must stop everything Start started, goroutines included (fake
// kubelets, echo servers, forward proxies, process watchers).
func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeGatewayEnv); mode != "" {
		os.Exit(fakeGateway(mode, os.Args[1:]))
	}
	goleak.VerifyTestMain(m)
}
