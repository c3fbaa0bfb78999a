package localenv

import (
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The delaying proxy tunnels like the others, passes every byte from the
// destination through its delay line, and Stop leaves no goroutine (delay
// line readers included) and no connection behind, with a tunnel still open.
func TestDelayingProxy(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := proxyTestEnv(t)
	if _, err := e.StartDelayingProxy(0); err == nil {
		t.Fatal("a delay of 0 was accepted")
	}
	p, err := e.StartDelayingProxy(20 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer e.stopForwardProxies()
	echo, err := startEcho()
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()

	var held net.Conn
	for i := range 3 {
		c, err := connectVia(p.URL.Host, echo.Addr)
		if err != nil {
			t.Fatalf("tunnel to %s: %v", echo.Addr, err)
		}
		roundTrip(t, "delaying http", c)
		if i < 2 {
			c.Close()
		} else {
			held = c
		}
	}
	if p.Carried() != 3 || p.Delayed() < 3 {
		t.Fatalf("carried %d tunnels and delayed %d chunks, want 3 and at least 3", p.Carried(), p.Delayed())
	}
	if err := e.stopForwardProxies(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if p.Open() != 0 || p.ClientConns() != 0 {
		t.Errorf("after Close: %d upstream and %d client connections open, want none", p.Open(), p.ClientConns())
	}
	_ = held.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := held.Read(make([]byte, 1)); err == nil {
		t.Errorf("a tunnel still delivers data after the proxy was closed")
	}
	held.Close()
}
