package konnectivity

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/clustergateway/cluster-gateway/internal/testpoll"
)

// Phases of a failover under load, as a request sees them when it starts.
const (
	bothUp  = iota // both proxy-servers up
	losing         // one lost, the Manager may not know yet
	oneDown        // the Manager reports it down (tunnel_up 0)
	back           // restarted or resumed, its tunnel rebuilt (tunnel_up 1)
	phases
)

// load is requests sent without pause by several workers on keep-alive
// connections (as the gateway's pooled transports keep them), counted by
// the phase in which each started.
type load struct {
	phase    atomic.Int32
	ok, fail [phases]atomic.Int64
	mu       sync.Mutex
	errs     [phases][]error // the first few failures of each phase
	stop     chan struct{}
	wg       sync.WaitGroup
	client   *http.Client
}

func startLoad(h *haStack, workers int) *load {
	l := &load{stop: make(chan struct{}), client: &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		DialContext: h.m.DialContext, TLSClientConfig: h.backendTLS(), MaxIdleConnsPerHost: workers,
	}}}
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				p := l.phase.Load()
				if err := get(l.client, h.stack); err != nil {
					l.fail[p].Add(1)
					l.mu.Lock()
					if len(l.errs[p]) < 5 {
						l.errs[p] = append(l.errs[p], err)
					}
					l.mu.Unlock()
					continue
				}
				l.ok[p].Add(1)
			}
		}()
	}
	return l
}

// await waits until n requests that started in the current phase succeeded.
func (l *load) await(t *testing.T, n int64) {
	t.Helper()
	p := l.phase.Load()
	testpoll.Eventually(t, 30*time.Second, fmt.Sprintf("%d requests succeed in phase %d", n, p), func() error {
		if got := l.ok[p].Load(); got < n {
			return fmt.Errorf("%d so far (%d failed)", got, l.fail[p].Load())
		}
		return nil
	})
}

func (l *load) finish() {
	close(l.stop)
	l.wg.Wait()
	l.client.CloseIdleConnections()
}

// Requests keep running while a proxy-server is SIGKILLed, or SIGSTOPped
// (silent: only the health check notices), and brought back. Requests in
// flight on the lost proxy-server may fail, but none hangs; every request
// that starts once the Manager reports it down succeeds, and so does every
// one after it is back, when its rebuilt tunnel carries dials again.
func TestRequestsRunningThroughAFailover(t *testing.T) {
	for _, how := range []string{"SIGKILL", "SIGSTOP"} {
		t.Run(how, func(t *testing.T) {
			h := newHAStack(t)
			lost := h.addresses()[0]
			l := startLoad(h, 4)
			l.await(t, 20)
			// Pooled transports are keyed on ID: losing a proxy-server
			// must not make the pool rebuild them.
			id := h.m.ID()
			sameID := func(when string) {
				if got := h.m.ID(); got != id {
					t.Errorf("%s: ID %s, was %s: a failover would rebuild every pooled transport", when, got, id)
				}
			}

			var resume func()
			pid := h.servers[0].cmd.Process.Pid
			l.phase.Store(losing)
			if how == "SIGKILL" {
				h.killServer(0)
				resume = func() { h.startServer(0) }
			} else {
				if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
				resume = func() {
					if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
						t.Fatal(err)
					}
				}
			}
			h.waitUp(lost, 0)
			l.phase.Store(oneDown)
			l.await(t, 40)
			sameID("one proxy-server down")
			// A silent one is left out at its first missed check, and
			// closed once it has missed HealthFailureThreshold in a row.
			testpoll.Eventually(t, 30*time.Second, "the lost proxy-server's tunnel closed", func() error {
				if st, _ := h.m.ServerStats(lost); st.OpenTunnels != 0 {
					return fmt.Errorf("%+v", st)
				}
				return nil
			})

			resume()
			h.waitReady()
			h.waitUp(lost, 1)
			l.phase.Store(back)
			before := h.serverDials(0)
			// The load's keep-alive connections stay on the other
			// proxy-server: new connections show the rebuilt tunnel in use.
			testpoll.Eventually(t, 30*time.Second, "the rebuilt tunnel carries dials", func() error {
				h.requestsSucceed(t, 4, "after "+how+" ended")
				if h.serverDials(0) <= before {
					return errors.New("no dial through it yet")
				}
				return nil
			})
			l.await(t, 40)
			sameID("its tunnel rebuilt")
			l.finish()

			for p, name := range []string{"both up", "losing one", "one down", "back"} {
				t.Logf("%s: %d requests succeeded, %d failed %v", name, l.ok[p].Load(), l.fail[p].Load(), l.errs[p])
			}
			for _, p := range []int{bothUp, oneDown, back} {
				if n := l.fail[p].Load(); n != 0 {
					t.Errorf("phase %d: %d requests failed: %v", p, n, l.errs[p])
				}
			}
			for _, err := range l.errs[losing] {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Errorf("a request in flight on the lost proxy-server hung until the client gave up: %v", err)
				}
			}
			if st, _ := h.m.ServerStats(lost); st.TunnelBuilds < 2 || st.OpenTunnels != 1 {
				t.Errorf("%s: want a rebuilt tunnel and one open; got %+v", lost, st)
			}
			h.finish()
		})
	}
}
