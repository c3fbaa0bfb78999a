package fairness

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
)

// A saturation is logged once, at its first refusal, however many follow;
// the next saturation, after the queue emptied, is logged again.
func TestSaturationLoggedOncePerEpisode(t *testing.T) {
	var buf bytes.Buffer
	klog.LogToStderr(false)
	klog.SetOutput(&buf)
	t.Cleanup(func() { klog.SetOutput(nil); klog.LogToStderr(true) })

	l := newLimiter(t, 1, 1, 0, time.Second)
	for episode := 1; episode <= 2; episode++ {
		held := mustAcquire(t, l, "prod-eu", "alice", Request)
		for range 5 {
			if _, err := l.Acquire(context.Background(), slotsOf(l, "prod-eu"), "bob", Request); err == nil {
				t.Fatal("want a refusal")
			}
		}
		held()
		klog.Flush()
		if n := strings.Count(buf.String(), "Cluster saturated"); n != episode {
			t.Fatalf("after %d saturations of 5 refusals each: %d log lines, want %d:\n%s", episode, n, episode, buf.String())
		}
	}
}
