package pool

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test must leave no goroutine behind: the pool owns all of its own.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
