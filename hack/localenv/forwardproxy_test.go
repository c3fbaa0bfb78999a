package localenv

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/net/proxy"

	"github.com/clustergateway/cluster-gateway/internal/testpoll"
)

// Both forward proxies tunnel to a loopback listener and count it, refuse
// anything off 127.0.0.0/8 without dialing, and Close leaves no goroutine
// and no connection behind, even with a tunnel still open.
func TestForwardProxies(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	e := proxyTestEnv(t)
	if err := e.startForwardProxies(); err != nil {
		t.Fatal(err)
	}
	defer e.stopForwardProxies()
	echo, err := startEcho()
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()

	dialers := map[string]func(addr string) (net.Conn, error){
		"http":   func(addr string) (net.Conn, error) { return connectVia(e.HTTPProxy.URL.Host, addr) },
		"socks5": func(addr string) (net.Conn, error) { return socksVia(e.SOCKS5Proxy.URL.Host, addr) },
	}
	var held []net.Conn
	for kind, dial := range dialers {
		p := map[string]*ForwardProxy{"http": e.HTTPProxy, "socks5": e.SOCKS5Proxy}[kind]
		for i := 0; i < 3; i++ {
			c, err := dial(echo.Addr)
			if err != nil {
				t.Fatalf("%s: tunnel to %s: %v", kind, echo.Addr, err)
			}
			roundTrip(t, kind, c)
			if i < 2 {
				c.Close()
			} else {
				held = append(held, c) // Close must cut this one
			}
		}
		testpoll.EventuallyTrue(t, 10*time.Second, kind+": closed tunnels are counted as closed", func() bool { return p.Open() == 1 })
		if p.Carried() != 3 {
			t.Errorf("%s carried %d tunnels, want 3", kind, p.Carried())
		}
		if c, err := dial("10.0.0.1:443"); err == nil {
			c.Close()
			t.Errorf("%s proxied to 10.0.0.1: it must only dial 127.0.0.0/8", kind)
		}
		if p.Refused() != 1 || p.Carried() != 3 {
			t.Errorf("%s: refused %d carried %d after a non-loopback request, want 1 and 3", kind, p.Refused(), p.Carried())
		}
	}

	if err := e.stopForwardProxies(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	for kind, p := range map[string]*ForwardProxy{"http": e.HTTPProxy, "socks5": e.SOCKS5Proxy} {
		if p.Open() != 0 || p.ClientConns() != 0 {
			t.Errorf("%s after Close: %d upstream and %d client connections open, want none", kind, p.Open(), p.ClientConns())
		}
	}
	for _, c := range held {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Errorf("a tunnel still delivers data after the proxy was closed")
		}
		c.Close()
	}
}

func roundTrip(t *testing.T, kind string, c net.Conn) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	msg := "hello through " + kind + "\n"
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || got != msg {
		t.Fatalf("%s: echoed %q, %v; want %q", kind, got, err, msg)
	}
	_ = c.SetDeadline(time.Time{})
}

// connectVia opens a CONNECT tunnel by hand, as the gateway's pool does.
func connectVia(proxyAddr, addr string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", proxyAddr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", addr, addr)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, fmt.Errorf("CONNECT %s: %s", addr, resp.Status)
	}
	if br.Buffered() > 0 {
		c.Close()
		return nil, fmt.Errorf("unexpected bytes after the CONNECT response")
	}
	return c, nil
}

func socksVia(proxyAddr, addr string) (net.Conn, error) {
	d, err := proxy.SOCKS5("tcp", proxyAddr, nil, &net.Dialer{Timeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	return d.Dial("tcp", addr)
}

// proxyTestEnv is an Env with only a state directory, enough to run the
// forward proxies.
func proxyTestEnv(t *testing.T) *Env {
	t.Helper()
	state := t.TempDir()
	if err := os.MkdirAll(filepath.Join(state, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	return &Env{Options: Options{StateDir: state}}
}
