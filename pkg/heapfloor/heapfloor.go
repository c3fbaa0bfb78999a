// Package heapfloor keeps the garbage collector from running while the
// heap is still small.
//
// With GOGC=100 the runtime collects each time the heap doubles its live
// size. A gateway serving a few clusters keeps a live heap of a few tens of
// MiB and allocates about 20 KiB per proxied request, so under load it
// collects several times a second, each time marking the same live heap and
// every goroutine's stack: a fixed cost per request that buys nothing while
// memory is plentiful. A floor on the heap goal spaces those collections out
// until the live heap is large enough for GOGC alone to do so; above that
// the runtime behaves exactly as GOGC says. GOMEMLIMIT still applies: the
// runtime collects at the limit whatever the goal.
package heapfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// Start keeps the heap goal at least floor bytes: after each collection it
// sets GOGC to the larger of the process's own (the GOGC environment
// variable, 100 by default) and what makes live heap × (1 + GOGC/100) reach
// floor. It does nothing when floor is 0 or GOGC is off. stop restores the
// process's own GOGC; later collections leave it alone.
func Start(floor uint64) (stop func()) {
	base := readGOGC()
	if floor == 0 || base < 0 {
		return func() {}
	}
	t := &tuner{floor: floor, base: base, current: base}
	t.arm()
	return t.stop
}

type tuner struct {
	floor uint64
	base  int

	mu      sync.Mutex // adjust (on the runtime's cleanup goroutine) and stop
	current int
	stopped bool
}

// sentinel is allocated once per collection cycle: its cleanup runs after
// the collection that finds it unreachable, which re-arms the next. It
// holds a pointer so that it is not batched with other small objects by the
// tiny allocator, whose blocks live as long as any of their objects.
type sentinel struct{ _ *int }

func (t *tuner) arm() {
	runtime.AddCleanup(new(sentinel), func(t *tuner) {
		if t.adjust() {
			t.arm()
		}
	}, t)
}

// adjust sets GOGC from the heap the last collection found live; false once
// stopped.
func (t *tuner) adjust() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	want := percentFor(readHeap(), t.floor, t.base)
	if want != t.current {
		debug.SetGCPercent(want)
		t.current = want
	}
	return true
}

func (t *tuner) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.stopped = true
	if t.current != t.base {
		debug.SetGCPercent(t.base)
		t.current = t.base
	}
}

// percentFor is the GOGC that makes the runtime's heap goal, live +
// (live + scanned stacks and globals) × GOGC/100, reach floor, and never
// less than base. It also keeps the runtime's minimum goal (4 MiB ×
// GOGC/100) within floor, which matters only for a tiny live heap.
func percentFor(h heap, floor uint64, base int) int {
	if h.live == 0 || h.live >= floor {
		return base
	}
	scan := h.live + h.stacks + h.globals
	p := ((floor-h.live)*100 + scan - 1) / scan // rounded up
	p = min(p, floor*100/runtimeHeapMinimum)
	return max(base, int(p))
}

// runtimeHeapMinimum is the runtime's smallest heap goal at GOGC=100
// (defaultHeapMinimum); it scales with GOGC.
const runtimeHeapMinimum = 4 << 20

// heap is what the last collection found.
type heap struct{ live, stacks, globals uint64 }

func readHeap() heap {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"}}
	metrics.Read(s)
	var v [3]uint64
	for i := range s {
		if s[i].Value.Kind() == metrics.KindUint64 {
			v[i] = s[i].Value.Uint64()
		}
	}
	return heap{live: v[0], stacks: v[1], globals: v[2]}
}

// readGOGC is the GOGC in effect (the environment's, or what a caller
// set); negative when off.
func readGOGC() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 100
	}
	return int(int32(s[0].Value.Uint64())) // the runtime stores an int32; off is -1
}
