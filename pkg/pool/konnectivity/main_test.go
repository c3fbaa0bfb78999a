package konnectivity

import (
	"testing"

	"go.uber.org/goleak"
)

// The tests start processes, not goroutines: every goroutine they and the
// Manager start must have returned.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
