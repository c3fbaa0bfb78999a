package pool

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Every test must leave no goroutine behind: the pool owns all of its own.
func TestMain(m *testing.M) {
	if dir := os.Getenv(idleUpstreamEnv); dir != "" {
		// The cluster of TestIdlePooledTargetMemory, in its own process.
		if err := serveIdleUpstream(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}
