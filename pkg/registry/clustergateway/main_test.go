package clustergateway

import (
	"testing"

	"go.uber.org/goleak"
)

// The REST runs over a store with an informer: every test must stop every goroutine it starts.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
