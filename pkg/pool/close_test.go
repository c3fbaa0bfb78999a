package pool

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/clustergateway/cluster-gateway/internal/testproc"
)

// After Close, goroutines, tracked connections and file descriptors return
// to where they were before the pool existed, across rotation, removal,
// eviction and a live stream that Close cuts.
func TestCloseReturnsToBaseline(t *testing.T) {
	u := newUpstream(t)
	// Settle the upstream's own fds and goroutines before the baseline.
	baselineFDs := testproc.MustOpenFDs(t)
	ignore := goleak.IgnoreCurrent()

	p := mustNew(t, Config{Capacity: 3, RetireGrace: 200 * time.Millisecond, IdleTTL: time.Hour})
	for i := range 6 {
		l := acquire(t, p, u.target(t, fmt.Sprintf("c%d", i), "client"))
		mustGet(t, l.Transport(), u.url, "/hello")
		mustGet(t, l.UpgradeTransport(), u.url, "/hello")
		l.Release()
	}
	held := acquire(t, p, u.target(t, "c5", "rotated"))
	w := startStream(t, held.Transport(), u)
	p.Remove("c4", ReasonDeleted)

	p.Close()
	p.Close() // idempotent
	if _, err := p.Acquire(u.target(t, "late", "client")); !errors.Is(err, ErrClosed) {
		t.Errorf("Acquire after Close: %v, want ErrClosed", err)
	}
	eventually(t, "stream to be cut by Close", w.ended)
	held.Release()

	st := p.Stats()
	if st.Live != 0 || st.Retiring != 0 || st.OpenConns != 0 || st.ActiveStreams != 0 {
		t.Errorf("after Close: %+v, want nothing live, retiring, open or active", st)
	}
	if st.Retired[ReasonShutdown] != 2 || st.Retired[ReasonEvicted] != 3 || st.Retired[ReasonRotated] != 1 || st.Retired[ReasonDeleted] != 1 {
		t.Errorf("retirements %v", st.Retired)
	}
	eventually(t, "fds to return to baseline", func() bool { return testproc.MustOpenFDs(t) <= baselineFDs })
	if err := goleak.Find(ignore); err != nil {
		t.Error(err)
	}
}
