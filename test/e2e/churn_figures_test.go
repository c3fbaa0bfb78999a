package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/clustergateway/cluster-gateway/internal/testpoll"
	"github.com/clustergateway/cluster-gateway/internal/testproc"
	"github.com/clustergateway/cluster-gateway/pkg/pool"
	"github.com/clustergateway/cluster-gateway/pkg/pool/konnectivity"
)

// Allowed drift from the baseline once everything is closed. The test
// process also runs the environment's own parts (fake kubelets, forward
// proxies, the informer's hub watch), whose goroutines come and go a little
// (settled, -2 to 0 goroutines and 0 fds in five runs of six cycles); one
// leaked transport or tunnel per cycle would be well past these, and one
// goroutine or fd per cycle is past them after churnEnough cycles.
const (
	goroutineSlack = 5
	fdSlack        = 5
	heapSlack      = 8 << 20
	settleTimeout  = 60 * time.Second
	churnEnough    = max(goroutineSlack, fdSlack) + 1
)

// churnFigures are what must return to the baseline after churn.
type churnFigures struct {
	Goroutines int
	FDs        int
	HeapInUse  uint64 // bytes, after runtime.GC
	Pool       pool.Stats
	Tunnel     konnectivity.Stats // zero without konnectivity
	// Upstream connections open in the forward proxies (in this process).
	HTTPProxyOpen, SOCKSProxyOpen int64
}

func (f churnFigures) String() string {
	return fmt.Sprintf("goroutines %d, fds %d, heap %.1f MiB, pool live %d retiring %d streams %d conns %d (created %d, retired %v), "+
		"tunnels %d proxy-server conns %d (rotations %d), forward-proxy tunnels open http %d socks5 %d",
		f.Goroutines, f.FDs, float64(f.HeapInUse)/(1<<20), f.Pool.Live, f.Pool.Retiring, f.Pool.ActiveStreams, f.Pool.OpenConns,
		f.Pool.Created, f.Pool.Retired, f.Tunnel.OpenTunnels, f.Tunnel.OpenProxyConns, f.Tunnel.Rotations, f.HTTPProxyOpen, f.SOCKSProxyOpen)
}

// figures reads the figures now. With settle, the test's own idle client
// connections are closed first and the heap is collected, so only what the
// gateway path still holds is counted.
func (g *inTestGateway) figures(t *testing.T, settle bool) churnFigures {
	t.Helper()
	if settle {
		g.client.CloseIdleConnections()
		runtime.GC()
		runtime.GC()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	f := churnFigures{
		Goroutines:     runtime.NumGoroutine(),
		FDs:            testproc.MustOpenFDs(t),
		HeapInUse:      ms.HeapAlloc,
		Pool:           g.pool.Stats(),
		HTTPProxyOpen:  env.HTTPProxy.Open(),
		SOCKSProxyOpen: env.SOCKS5Proxy.Open(),
	}
	if g.tunnel != nil {
		f.Tunnel = g.tunnel.Stats()
	}
	return f
}

// clean is what the figures must come to once nothing is in use: no pool
// entries, streams or connections, one tunnel over one connection to each
// proxy-server, no forward-proxy tunnel; goroutines, fds and heap as now.
func (g *inTestGateway) clean(t *testing.T) churnFigures {
	t.Helper()
	f := g.figures(t, true)
	f.Pool.Live, f.Pool.Retiring, f.Pool.ActiveStreams, f.Pool.OpenConns = 0, 0, 0, 0
	f.HTTPProxyOpen, f.SOCKSProxyOpen = 0, 0
	if g.tunnel != nil {
		servers := int64(len(env.Konnectivity.Servers))
		f.Tunnel.OpenTunnels, f.Tunnel.OpenProxyConns = servers, servers
	}
	return f
}

// backAt says what is still above the baseline, or "" when nothing is.
func (f churnFigures) backAt(base churnFigures) string {
	var why []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			why = append(why, fmt.Sprintf(format, args...))
		}
	}
	check(f.Pool.Live == base.Pool.Live, "pool entries %d (baseline %d)", f.Pool.Live, base.Pool.Live)
	check(f.Pool.Retiring == base.Pool.Retiring, "retiring entries %d (baseline %d)", f.Pool.Retiring, base.Pool.Retiring)
	check(f.Pool.ActiveStreams == base.Pool.ActiveStreams, "active streams %d (baseline %d)", f.Pool.ActiveStreams, base.Pool.ActiveStreams)
	check(f.Pool.OpenConns == base.Pool.OpenConns, "open pool connections %d (baseline %d)", f.Pool.OpenConns, base.Pool.OpenConns)
	check(f.Tunnel.OpenTunnels == base.Tunnel.OpenTunnels, "open tunnels %d (baseline %d)", f.Tunnel.OpenTunnels, base.Tunnel.OpenTunnels)
	check(f.Tunnel.OpenProxyConns == base.Tunnel.OpenProxyConns, "connections to the proxy-server %d (baseline %d)", f.Tunnel.OpenProxyConns, base.Tunnel.OpenProxyConns)
	check(f.HTTPProxyOpen == base.HTTPProxyOpen, "HTTP CONNECT tunnels open %d (baseline %d)", f.HTTPProxyOpen, base.HTTPProxyOpen)
	check(f.SOCKSProxyOpen == base.SOCKSProxyOpen, "SOCKS5 tunnels open %d (baseline %d)", f.SOCKSProxyOpen, base.SOCKSProxyOpen)
	check(f.Goroutines <= base.Goroutines+goroutineSlack, "goroutines %d (baseline %d + %d)", f.Goroutines, base.Goroutines, goroutineSlack)
	check(f.FDs <= base.FDs+fdSlack, "open fds %d (baseline %d + %d)", f.FDs, base.FDs, fdSlack)
	check(f.HeapInUse <= base.HeapInUse+heapSlack, "heap in use %.1f MiB (baseline %.1f + %d MiB)",
		float64(f.HeapInUse)/(1<<20), float64(base.HeapInUse)/(1<<20), heapSlack>>20)
	if len(why) == 0 {
		return ""
	}
	return fmt.Sprint(why)
}

// awaitBaseline polls until the figures are back at base, and fails with
// what is not, plus the stacks of goroutines that were not there at the
// baseline (goleak-style; atBaseline nil: none to compare with), if they
// are not within settleTimeout.
func (g *inTestGateway) awaitBaseline(t *testing.T, base churnFigures, atBaseline goleak.Option) churnFigures {
	t.Helper()
	var f churnFigures
	err := testpoll.UntilEvery(settleTimeout, 250*time.Millisecond, "back at the baseline", func() error {
		f = g.figures(t, true)
		if why := f.backAt(base); why != "" {
			return errors.New(why)
		}
		return nil
	})
	if err != nil {
		leaks := "(none: this is the warm-up, taken as the baseline for goroutines)"
		if atBaseline != nil {
			if err := goleak.Find(atBaseline); err != nil {
				leaks = err.Error()
			}
		}
		t.Errorf("%v\nnow:      %s\nbaseline: %s\n"+
			"goroutines that were not there at the baseline (replacements of long-lived ones, such as the current tunnel's, are listed too):\n%s",
			err, f, base, leaks)
	}
	return f
}

// writeHeapProfile writes the in-use heap to -churn.profiles/name, if set.
func writeHeapProfile(t *testing.T, name string) {
	t.Helper()
	if *churnProfiles == "" {
		return
	}
	runtime.GC()
	path := filepath.Join(*churnProfiles, name)
	f, err := os.Create(path)
	if err != nil {
		t.Errorf("heap profile: %v", err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		t.Errorf("heap profile: %v", err)
	}
	t.Logf("heap profile written to %s", path)
}
