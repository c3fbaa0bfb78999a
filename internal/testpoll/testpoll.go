// Package testpoll waits in tests until something holds: one helper, with
// one meaning, for the unit tests of every package, hack/localenv and the
// end-to-end suite. A deadline catches a hang; it never measures speed.
package testpoll

import (
	"errors"
	"fmt"
	"time"
)

// maxInterval bounds the pause between two calls of a condition. Pauses
// start at a millisecond and double up to it: quick conditions are seen
// quickly, slow ones are not polled in a busy loop.
const maxInterval = 100 * time.Millisecond

// Until calls cond at once and then again, with growing pauses, until it
// returns nil, and returns nil. If cond still fails once within has passed
// since the first call, Until returns an error that names what and carries
// cond's last error.
func Until(within time.Duration, what string, cond func() error) error {
	return poll(within, 0, what, cond)
}

// UntilEvery is Until with a fixed pause between calls, for a condition
// that is costly to evaluate (one that collects garbage, say).
func UntilEvery(within, pause time.Duration, what string, cond func() error) error {
	return poll(within, pause, what, cond)
}

func poll(within, fixed time.Duration, what string, cond func() error) error {
	deadline := time.Now().Add(within)
	pause := time.Millisecond
	if fixed > 0 {
		pause = fixed
	}
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("%s: not within %s: %w", what, within, err)
		}
		time.Sleep(min(pause, time.Until(deadline)))
		if fixed == 0 {
			pause = min(2*pause, maxInterval)
		}
	}
}

// T is what Eventually needs of a test.
type T interface {
	Helper()
	Fatal(args ...any)
}

// Eventually is Until that fails the test (from the test's goroutine).
func Eventually(t T, within time.Duration, what string, cond func() error) {
	t.Helper()
	if err := Until(within, what, cond); err != nil {
		t.Fatal(err)
	}
}

// errNotYet is a boolean condition's last error.
var errNotYet = errors.New("the condition does not hold")

// EventuallyTrue is Eventually for a condition that says only whether it holds.
func EventuallyTrue(t T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	Eventually(t, within, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}
