package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat.
var clockTicks = func() float64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if v, perr := strconv.ParseFloat(strings.TrimSpace(string(out)), 64); err == nil && perr == nil && v > 0 {
		return v
	}
	return 100
}()

// procCPU is the user+system CPU a process has used (10 ms resolution).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces; fields start after its ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return time.Duration((ut + st) / clockTicks * float64(time.Second)), nil
}

// selfCPU is this process's CPU from getrusage: the load clients, and the
// bare reverse proxy when it runs.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procRSS is VmRSS from /proc/<pid>/status, in bytes.
func procRSS(pid int) (float64, error) { return procStatus(pid, "VmRSS") }

// procHWM is VmHWM (peak RSS since start or the last reset) in bytes.
func procHWM(pid int) (float64, error) { return procStatus(pid, "VmHWM") }

// procStatus is a memory field of /proc/<pid>/status in bytes.
func procStatus(pid int, field string) (float64, error) {
	return kbField(fmt.Sprintf("/proc/%d/status", pid), field)
}

// kbField is field of a /proc file of "field: N kB" lines, in bytes.
func kbField(path, field string) (float64, error) {
	b, err := os.ReadFile(path)
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, field+":"); ok && err == nil {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb * 1024, err
		}
	}
	return 0, cmp.Or(err, fmt.Errorf("no %s in %s", field, path))
}

// cpuOf reads the CPU of every role; "bench" is this process.
func cpuOf(pids map[string]int) (map[string]time.Duration, error) {
	out := map[string]time.Duration{"bench": selfCPU()}
	for role, pid := range pids {
		c, err := procCPU(pid)
		if err != nil {
			return nil, fmt.Errorf("CPU of %s (pid %d): %w", role, pid, err)
		}
		out[role] = c
	}
	return out, nil
}

// cpuDuring runs f and returns the CPU each role's process used meanwhile
// ("bench" is this process), and f's error.
func cpuDuring(pids map[string]int, f func() error) (map[string]time.Duration, error) {
	c0, err := cpuOf(pids)
	if err != nil {
		return nil, err
	}
	ferr := f()
	c1, err := cpuOf(pids)
	if err != nil {
		return nil, err
	}
	for role := range c1 {
		c1[role] -= c0[role]
	}
	return c1, ferr
}

// addCPU adds each role's CPU of d to sum, made if nil, and returns it.
func addCPU(sum, d map[string]time.Duration) map[string]time.Duration {
	if sum == nil {
		sum = map[string]time.Duration{}
	}
	for role, c := range d {
		sum[role] += c
	}
	return sum
}

// machineCPU is the busy CPU time of the whole machine: user, nice, system,
// irq and softirq from the first line of /proc/stat (not idle, iowait or
// steal; guest time is already in user).
func machineCPU() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat begins %q", line)
	}
	var busy float64
	for _, i := range []int{1, 2, 3, 6, 7} {
		n, _ := strconv.ParseFloat(f[i], 64)
		busy += n
	}
	return time.Duration(busy / clockTicks * float64(time.Second)), nil
}

// rssOf reads pid's RSS, for sampleMax.
func rssOf(pid int) func() (float64, error) { return func() (float64, error) { return procRSS(pid) } }

// sleep waits d, or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// resetPeakRSS resets the process's VmHWM to its current RSS.
func resetPeakRSS(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// machine describes where the numbers were taken.
type machine struct {
	CPUs    int
	Model   string
	MemGiB  float64
	Go      string
	Kernel  string
	Started time.Time
}

func describeMachine(goBin string) machine {
	m := machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), Started: time.Now()}
	if out, err := exec.Command("nproc").Output(); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil {
			m.CPUs = n
		}
	}
	if out, err := exec.Command(goBin, "version").Output(); err == nil {
		m.Go = strings.TrimSpace(string(out))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.Model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem, _ := kbField("/proc/meminfo", "MemTotal")
	m.MemGiB = mem / (1 << 30)
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// retry marks an error after which poll tries again; any other error ends it.
type retry struct{ error }

// again is err as a retry, nil if nil.
func again(err error) error {
	if err == nil {
		return nil
	}
	return retry{err}
}

// poll calls f every interval until it returns nil, for up to timeout, and
// returns how long that took; after the timeout the error names what and
// f's last error.
func poll(ctx context.Context, every, timeout time.Duration, what string, f func(context.Context) error) (time.Duration, error) {
	start := time.Now()
	var last error
	err := wait.PollUntilContextTimeout(ctx, every, timeout, true, func(ctx context.Context) (bool, error) {
		last = f(ctx)
		if r, ok := last.(retry); ok {
			last = r.error
			return false, nil
		}
		return last == nil, last
	})
	switch {
	case err == nil:
		return time.Since(start), nil
	case ctx.Err() != nil:
		return 0, ctx.Err()
	case !wait.Interrupted(err):
		return 0, err
	}
	return 0, fmt.Errorf("%s: not after %s (last error: %w)", what, time.Since(start).Round(time.Second), last)
}

// sampleMax calls read every interval until the returned stop is called,
// which returns the most read gave and how many reads it made.
func sampleMax(interval time.Duration, read func() (float64, error)) (stop func() (float64, int)) {
	done, out := make(chan struct{}), make(chan [2]float64, 1)
	go func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		var most, n float64
		for {
			if v, err := read(); err == nil {
				most, n = max(most, v), n+1
			}
			select {
			case <-done:
				out <- [2]float64{most, n}
				return
			case <-tick.C:
			}
		}
	}()
	return func() (float64, int) { close(done); r := <-out; return r[0], int(r[1]) }
}
