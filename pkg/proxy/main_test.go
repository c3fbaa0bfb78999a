package proxy

import (
	"testing"

	"go.uber.org/goleak"
)

// The proxy drives pooled transports, an informer and upstream streams:
// every test must leave no goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
