package pool

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// pipe copies both ways until either side ends, then closes both.
func pipe(a, b net.Conn) {
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(a, b)
		a.Close()
		b.Close()
		close(done)
	}()
	_, _ = io.Copy(b, a)
	a.Close()
	b.Close()
	<-done
}

// resolveLikeGlibc is how the test proxies read the host of host:port:
// as a cgo/glibc resolver (getaddrinfo), curl and most forward proxies do,
// inet_aton forms (127.1, 2130706433, 0x7f000001, 0177.0.0.1) are IPv4
// addresses, and a trailing dot is dropped as URL parsers drop it. Go's own
// resolver reads none of them, so without this the proxies would not reach
// what a real one reaches. Written apart from endpointpolicy's parser: the
// test must not share the code it tests.
func resolveLikeGlibc(hostport string) string {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport
	}
	parts := strings.Split(strings.TrimSuffix(host, "."), ".")
	if len(parts) > 4 {
		return hostport
	}
	var addr uint64
	for i, part := range parts {
		// inet_aton: 0x hex, leading-0 octal, else decimal (ParseUint's
		// base 0 also takes 0b, 0o and '_', which inet_aton does not).
		if part == "" || strings.Contains(part, "_") || len(part) > 1 && part[0] == '0' && strings.ContainsRune("oObB", rune(part[1])) {
			return hostport
		}
		n, err := strconv.ParseUint(part, 0, 32)
		if err != nil {
			return hostport
		}
		if i < len(parts)-1 {
			if n > 255 {
				return hostport
			}
			addr |= n << (8 * (3 - i))
			continue
		}
		if n >= 1<<(8*(4-i)) { // the last part fills the bytes left
			return hostport
		}
		addr |= n
	}
	return net.JoinHostPort(net.IPv4(byte(addr>>24), byte(addr>>16), byte(addr>>8), byte(addr)).String(), port)
}

// connectProxy is an HTTP CONNECT proxy that requires basic auth; it
// resolves hosts as resolveLikeGlibc does.
func connectProxy(t *testing.T, user, pass string) (*url.URL, *atomic.Int64) {
	t.Helper()
	var connects atomic.Int64
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
			return
		}
		if r.Header.Get("Proxy-Authorization") != want {
			http.Error(w, "bad credentials", http.StatusProxyAuthRequired)
			return
		}
		upstream, err := net.Dial("tcp", resolveLikeGlibc(r.Host))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		connects.Add(1)
		conn, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			upstream.Close()
			return
		}
		if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			conn.Close()
			upstream.Close()
			return
		}
		if n := brw.Reader.Buffered(); n > 0 {
			b, _ := brw.Reader.Peek(n)
			_, _ = upstream.Write(b)
		}
		pipe(conn, upstream)
	}))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, pass)
	return u, &connects
}

// socks5Proxy is a minimal no-auth SOCKS5 server (RFC 1928, CONNECT only);
// it resolves names as resolveLikeGlibc does.
func socks5Proxy(t *testing.T) (*url.URL, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var connects atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				if up := socks5Handshake(c); up != nil {
					connects.Add(1)
					pipe(c, up)
					return
				}
				c.Close()
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return &url.URL{Scheme: "socks5", Host: ln.Addr().String()}, &connects
}

func socks5Handshake(c net.Conn) net.Conn {
	hdr := make([]byte, 2)
	if _, err := io.ReadFull(c, hdr); err != nil || hdr[0] != 5 {
		return nil
	}
	if _, err := io.ReadFull(c, make([]byte, hdr[1])); err != nil {
		return nil
	}
	if _, err := c.Write([]byte{5, 0}); err != nil {
		return nil
	}
	req := make([]byte, 4)
	if _, err := io.ReadFull(c, req); err != nil || req[1] != 1 {
		return nil
	}
	var host string
	switch req[3] {
	case 1:
		ip := make([]byte, 4)
		if _, err := io.ReadFull(c, ip); err != nil {
			return nil
		}
		host = net.IP(ip).String()
	case 3:
		n := make([]byte, 1)
		if _, err := io.ReadFull(c, n); err != nil {
			return nil
		}
		name := make([]byte, n[0])
		if _, err := io.ReadFull(c, name); err != nil {
			return nil
		}
		host = string(name)
	default:
		return nil
	}
	port := make([]byte, 2)
	if _, err := io.ReadFull(c, port); err != nil {
		return nil
	}
	up, err := net.Dial("tcp", resolveLikeGlibc(net.JoinHostPort(host, strconv.Itoa(int(binary.BigEndian.Uint16(port))))))
	if err != nil {
		_, _ = c.Write([]byte{5, 5, 0, 1, 0, 0, 0, 0, 0, 0})
		return nil
	}
	if _, err := c.Write([]byte{5, 0, 0, 1, 0, 0, 0, 0, 0, 0}); err != nil {
		up.Close()
		return nil
	}
	return up
}

// countingDialer stands in for a konnectivity tunnel.
type countingDialer struct {
	dials atomic.Int64
}

func (d *countingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d.dials.Add(1)
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

// Proxied and tunneled entries verify the upstream certificate end to end,
// use h2, and their connections are tracked and closed like direct ones.
func TestProxiesAndTunnel(t *testing.T) {
	u := newUpstream(t)
	httpProxy, httpConnects := connectProxy(t, "gw", "s3cret")
	socksProxy, socksConnects := socks5Proxy(t)
	tunnel := &countingDialer{}
	p := newTestPool(t, Config{DialTimeout: 5 * time.Second})

	check := func(name string, tg *Target, through func() int64) {
		t.Helper()
		l := acquire(t, p, tg)
		for range 3 {
			if resp, body := mustGet(t, l.Transport(), u.url, "/hello"); resp.ProtoMajor != 2 || body != "HTTP/2.0 client" {
				t.Errorf("%s: %s %q, want h2 with the client certificate", name, resp.Proto, body)
			}
		}
		if resp, _ := mustGet(t, l.UpgradeTransport(), u.url, "/hello"); resp.ProtoMajor != 1 {
			t.Errorf("%s: upgrade transport used %s", name, resp.Proto)
		}
		l.Release()
		if got := through(); got != 2 {
			t.Errorf("%s: %d connections went through it, want 2 (h2 and upgrade)", name, got)
		}
	}

	tg := u.target(t, "via-http", "client")
	tg.ProxyURL = httpProxy
	check("http proxy", tg, httpConnects.Load)

	tg = u.target(t, "via-socks", "client")
	tg.ProxyURL = socksProxy
	check("socks5 proxy", tg, socksConnects.Load)

	tg = u.target(t, "via-tunnel", "client")
	tg.Tunnel, tg.TunnelID = tunnel, "tunnel-1"
	check("tunnel", tg, tunnel.dials.Load)

	// A new tunnel identity is a rotation.
	tg.TunnelID = "tunnel-2"
	acquire(t, p, tg).Release()
	if got := p.Stats().Retired[ReasonRotated]; got != 1 {
		t.Errorf("tunnel rotation: %d rotated, want 1", got)
	}

	bad := u.target(t, "bad-proxy-auth", "client")
	wrong := *httpProxy
	wrong.User = url.UserPassword("gw", "wrong")
	bad.ProxyURL = &wrong
	l := acquire(t, p, bad)
	if _, _, err := get(context.Background(), l.Transport(), u.url, "/hello"); err == nil {
		t.Error("request through a proxy that refused CONNECT succeeded")
	}
	l.Release()

	p.Close()
	if st := p.Stats(); st.OpenConns != 0 || st.Retiring != 0 {
		t.Errorf("after Close: %+v", st)
	}
}
