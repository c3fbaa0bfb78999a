package fairness

import (
	"testing"

	"go.uber.org/goleak"
)

// Waiters block in Acquire: every test must leave none behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
