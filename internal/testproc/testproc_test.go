package testproc

import (
	"net"
	"os"
	"testing"
)

// A listener and a connection to it show up in both counts, and go again.
func TestCounts(t *testing.T) {
	fds := MustOpenFDs(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if got := MustOpenFDs(t); got != fds+3 {
		t.Errorf("open fds %d with a listener and both ends of a connection, want %d", got, fds+3)
	}
	if n, err := TCPConns(os.Getpid(), "127.0.0.1", port); err != nil || n != 1 {
		t.Errorf("TCPConns to the listener = %d, %v; want the one client connection", n, err)
	}
	c.Close()
	s.Close()
	if n, err := TCPConns(os.Getpid(), "127.0.0.1", port); err != nil || n != 0 {
		t.Errorf("TCPConns after close = %d, %v; want 0", n, err)
	}
}
