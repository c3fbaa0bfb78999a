package testpoll

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	n := 0
	if err := Until(time.Minute, "third call", func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || n != 3 {
		t.Fatalf("Until = %v after %d calls, want nil after 3", err, n)
	}

	n = 0
	start := time.Now()
	err := Until(20*time.Millisecond, "never", func() error { n++; return errors.New("last words") })
	if err == nil || !strings.Contains(err.Error(), "never: not within 20ms: last words") {
		t.Fatalf("Until of a condition that never holds = %v", err)
	}
	if time.Since(start) < 20*time.Millisecond || n < 2 {
		t.Fatalf("Until gave up after %s and %d calls, before its deadline", time.Since(start), n)
	}
}
