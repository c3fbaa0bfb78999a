// Package testproc reads, from /proc, what a process holds: open file
// descriptors and TCP connections. It is the kernel's view, independent of
// what the process reports about itself. Linux only; elsewhere the
// functions return an error.
package testproc

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// OpenFDs counts the open file descriptors of this process.
func OpenFDs() (int, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, fmt.Errorf("counting open file descriptors: %w", err)
	}
	// One of them is the directory being read.
	return len(ents) - 1, nil
}

// T is what the Must helpers need of a test.
type T interface {
	Helper()
	Fatal(args ...any)
}

// MustOpenFDs is OpenFDs that fails the test.
func MustOpenFDs(t T) int {
	t.Helper()
	n, err := OpenFDs()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TCPConns counts the ESTABLISHED TCP connections that process pid holds
// (by socket inode in /proc/<pid>/fd) whose remote end is ip:port (IPv4,
// over AF_INET or as a v4-mapped AF_INET6 address).
func TCPConns(pid int, ip string, port int) (int, error) {
	v4 := net.ParseIP(ip).To4()
	if v4 == nil {
		return 0, fmt.Errorf("TCPConns: %q is not an IPv4 address", ip)
	}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("listing the sockets of pid %d: %w", pid, err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(dir, fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	hex4 := fmt.Sprintf("%02X%02X%02X%02X:%04X", v4[3], v4[2], v4[1], v4[0], port)
	want := map[string]bool{hex4: true, "0000000000000000FFFF0000" + hex4: true}
	n := 0
	for _, table := range []string{"tcp", "tcp6"} {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) > 9 && want[f[2]] && f[3] == "01" && inodes[f[9]] {
				n++
			}
		}
	}
	return n, nil
}
