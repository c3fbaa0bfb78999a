package credentials

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A provider's descendants can leave its process group (setsid, a double
// fork), so killing the group does not kill them. The launcher is a child
// subreaper instead: every orphan in its subtree becomes its child, however
// it left its group, and the launcher kills and waits for each until it
// has no child left. Unprivileged, unlike a PID namespace or a cgroup of
// its own per run (the chart's RuntimeDefault seccomp profile refuses
// unprivileged user namespaces; cgroups are not delegated to the pod).

// reapBound is how long the launcher waits for killed descendants to die:
// one that cannot die at once (in uninterruptible sleep) is left to init
// rather than holding client-go, which waits for the launcher unbounded.
const reapBound = 5 * time.Second

// becomeSubreaper makes the process the reaper of its orphaned descendants.
func becomeSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// reapDescendants kills every child of the process, and every descendant
// orphaned onto it as a child dies, until none is left or reapBound
// passed. It must be called after the children the process waits for
// itself (exec.Cmd.Wait) were waited for. A process is reparented before
// its parent can be waited for, so once wait finds no child at all no
// descendant is left.
func reapDescendants() {
	self := os.Getpid()
	deadline := time.Now().Add(reapBound)
	for {
		for _, pid := range childrenOf(self) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case err == syscall.ECHILD:
			return
		case err == syscall.EINTR, pid > 0:
			continue // its orphans, if it had any, are children now: kill them too
		case err != nil || time.Now().After(deadline):
			return
		}
		time.Sleep(5 * time.Millisecond) // killed, not dead yet
	}
}

// childrenOf lists the processes whose parent is ppid, from /proc. A pid
// listed is a child not yet waited for, so it cannot be reused for another
// process while it is killed.
func childrenOf(ppid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == ppid {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(raw, ')')
		if i < 0 {
			continue
		}
		fields := bytes.Fields(raw[i+1:])
		if len(fields) < 2 {
			continue
		}
		if p, err := strconv.Atoi(string(fields[1])); err == nil && p == ppid {
			out = append(out, pid)
		}
	}
	return out
}
