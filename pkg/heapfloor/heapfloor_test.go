package heapfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

const mib = 1 << 20

func TestPercentFor(t *testing.T) {
	for _, tc := range []struct {
		name  string
		h     heap
		floor uint64
		base  int
		want  int
	}{
		{"small live heap: goal raised to the floor", heap{live: 16 * mib, stacks: 3 * mib, globals: mib}, 64 * mib, 100, 240},
		{"rounded up, never below the floor", heap{live: 30 * mib}, 64 * mib, 100, 114},
		{"live heap past half the floor: GOGC alone", heap{live: 40 * mib}, 64 * mib, 100, 100},
		{"live heap above the floor", heap{live: 80 * mib}, 64 * mib, 100, 100},
		{"the process's own GOGC when higher", heap{live: 16 * mib}, 64 * mib, 400, 400},
		{"tiny heap: the runtime's minimum goal (4 MiB × GOGC/100) kept within the floor", heap{live: mib / 2}, 64 * mib, 100, 1600},
		{"nothing marked yet", heap{}, 64 * mib, 100, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := percentFor(tc.h, tc.floor, tc.base)
			if got != tc.want {
				t.Fatalf("percentFor(%+v, %d, %d) = %d, want %d", tc.h, tc.floor, tc.base, got, tc.want)
			}
			if got > tc.base && got < 1600 {
				goal := func(p int) uint64 { return tc.h.live + (tc.h.live+tc.h.stacks+tc.h.globals)*uint64(p)/100 }
				if goal(got) < tc.floor || goal(got-1) >= tc.floor {
					t.Fatalf("GOGC %d gives a goal of %d, %d at one less: want the least reaching %d", got, goal(got), goal(got-1), tc.floor)
				}
			}
		})
	}
}

// TestFloorFollowsTheLiveHeap runs the tuner in this process: after a
// collection of a small heap the runtime's goal is the floor; with a live
// heap above half the floor GOGC is the process's own again; stop restores
// it for good.
func TestFloorFollowsTheLiveHeap(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	const floor = 96 * mib
	stop := Start(floor)
	defer stop()

	gcUntil(t, "the goal reaches the floor", func() bool { return readGOGC() > 100 })
	if g := heapGoal(); g < floor || g > floor+floor/10 {
		t.Fatalf("heap goal %d MiB with a small live heap, want the floor, %d MiB", g/mib, floor/mib)
	}

	ballast := make([]*[mib]byte, 64) // 64 MiB live: more than half the floor
	for i := range ballast {
		ballast[i] = new([mib]byte)
	}
	gcUntil(t, "GOGC back to 100 above the floor", func() bool { return readGOGC() == 100 })
	runtime.KeepAlive(ballast)
	ballast = nil

	gcUntil(t, "the floor again once the heap is small", func() bool { return readGOGC() > 100 })
	stop()
	if p := readGOGC(); p != 100 {
		t.Fatalf("GOGC %d after stop, want 100", p)
	}
	collect(3)
	if p := readGOGC(); p != 100 {
		t.Fatalf("GOGC %d after stop and more collections: the tuner went on", p)
	}
}

func TestOffAndZeroLeaveGOGCAlone(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	stop := Start(96 * mib) // GOGC off: nothing to raise
	defer stop()
	collect(3)
	if p := readGOGC(); p != -1 {
		t.Fatalf("GOGC %d with GOGC off, want it left off", p)
	}

	debug.SetGCPercent(100)
	stopZero := Start(0) // no floor
	defer stopZero()
	collect(3)
	if p := readGOGC(); p != 100 {
		t.Fatalf("GOGC %d with no floor, want 100", p)
	}
}

func collect(n int) {
	for range n {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// gcUntil collects until cond holds (the tuner runs on the runtime's
// cleanup goroutine just after a collection), for at most 10 s.
func gcUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s (GOGC %d, goal %d MiB)", what, readGOGC(), heapGoal()/mib)
		}
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
}

func heapGoal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
