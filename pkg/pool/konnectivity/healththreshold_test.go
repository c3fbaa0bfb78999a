package konnectivity

import (
	"errors"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/clustergateway/cluster-gateway/internal/testpoll"
)

// A proxy-server that leaves health checks unanswered, fewer in a row than
// HealthFailureThreshold (a GC pause, CPU throttling; here SIGSTOP with a
// threshold it cannot reach): its tunnel takes no new dials, so requests go
// through the other one, but the tunnel and the stream on it stay. Once it
// answers again the same tunnel (no rebuild) takes dials again and the
// stream goes on.
func TestUnansweredChecksBelowTheThreshold(t *testing.T) {
	h := newHAStackWith(t, func(o *Config) { o.HealthFailureThreshold = 1 << 20 })
	slow := h.addresses()[0]
	// The pool renews its tunnelled connections then. Only the stopped
	// proxy-server's calls are counted: on a loaded machine the other one
	// may miss a check too (a check's timeout is a second), and its first
	// miss calls the function as well, as it should.
	var missedCalls atomic.Int32
	h.m.OnMissedCheck(func(server string) {
		if server == slow {
			missedCalls.Add(1)
		}
	})
	pid := h.servers[0].cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })

	h.waitUp(slow, 0)
	testpoll.Eventually(t, 10*time.Second, "OnMissedCheck's function called", func() error {
		if missedCalls.Load() == 0 {
			return errors.New("not yet")
		}
		return nil
	})
	h.requestsSucceed(t, 10, "one proxy-server not answering its health checks")
	if n := missedCalls.Load(); n != 1 {
		t.Errorf("OnMissedCheck's function ran %d times for %s during one run of missed checks; want once", n, slow)
	}
	select {
	case <-h.streams[slow].done:
		t.Fatalf("the stream on the proxy-server that missed checks below the threshold ended: %v", h.streams[slow].err)
	default:
	}
	if st, _ := h.m.ServerStats(slow); st.HealthCheckFailures != 0 || st.OpenTunnels != 1 || st.TunnelBuilds != 1 {
		t.Errorf("below the threshold: want its tunnel kept, none closed by the health check; got %+v", st)
	}

	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	h.waitUp(slow, 1)
	h.streams[slow].expectTicks(t, 5)
	testpoll.Eventually(t, 30*time.Second, "the proxy-server that answers again carries dials", func() error {
		before := h.serverDials(0)
		h.requestsSucceed(t, 4, "after SIGCONT")
		if h.serverDials(0) <= before {
			return errors.New("no dial through it yet")
		}
		return nil
	})
	if st, _ := h.m.ServerStats(slow); st.TunnelBuilds != 1 || st.HealthCheckFailures != 0 {
		t.Errorf("after it answered again: want the same tunnel, not a rebuild; got %+v", st)
	}
	h.finish()
}
