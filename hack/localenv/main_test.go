package localenv

import (
	"testing"

	"go.uber.org/goleak"
)

// Stop must stop everything Start started, goroutines included (fake
// kubelets, echo servers, forward proxies, process watchers).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
