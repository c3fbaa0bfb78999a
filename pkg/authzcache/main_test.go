package authzcache

import (
	"testing"

	"go.uber.org/goleak"
)

// A shared question runs in its own goroutine: none may outlive a test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
