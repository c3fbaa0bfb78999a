package inventory

import (
	"testing"

	"go.uber.org/goleak"
)

// The controller runs informers, an elector and workers: every test must
// stop every goroutine it starts.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
