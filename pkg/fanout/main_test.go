package fanout

import (
	"testing"

	"go.uber.org/goleak"
)

// The fan-out runs a goroutine per cluster read: none may outlive its request.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
