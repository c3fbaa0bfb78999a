package gateways

import (
	"testing"

	"go.uber.org/goleak"
)

// The Cache runs an informer: every test must stop every goroutine it starts.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
