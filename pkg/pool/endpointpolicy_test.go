package pool

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/clustergateway/cluster-gateway/pkg/endpointpolicy"
)

// With loopback denied (config/deployment.yaml and the chart deny
// 127.0.0.0/8 and ::1/128), a ClusterGateway writer must not reach the
// gateway's own loopback by naming the unspecified address: on Linux a
// connection to 0.0.0.0 is made to the local host.
func TestEndpointPolicyUnspecifiedAddressIsLoopback(t *testing.T) {
	u := newUpstream(t) // listens on 127.0.0.1
	policy, err := (&endpointpolicy.Config{DenyCIDRs: []string{"169.254.0.0/16", "127.0.0.0/8", "::1/128"}}).Policy()
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(u.url.Host)
	unspecified := u.target(t, "unspecified", "client-1")
	unspecified.Address = &url.URL{Scheme: "https", Host: net.JoinHostPort("0.0.0.0", port)}
	unspecified.ServerName = "127.0.0.1" // the upstream's certificate names 127.0.0.1
	send := func(p *Pool, tg *Target) error {
		l, err := p.Acquire(tg)
		if err != nil {
			return err
		}
		defer l.Release()
		_, _, err = get(context.Background(), l.Transport(), tg.Address, "/hello")
		return err
	}
	// Without a policy 0.0.0.0 reaches the upstream: the test proves what it says.
	if err := send(newTestPool(t, Config{Capacity: 8}), unspecified); err != nil {
		t.Fatalf("https://0.0.0.0:%s without a policy: %v, want the upstream's answer", port, err)
	}
	p := newTestPool(t, Config{Capacity: 8, Endpoints: policy})
	for _, tg := range []*Target{u.target(t, "loopback", "client-1"), unspecified} {
		if err := send(p, tg); !errors.Is(err, endpointpolicy.ErrDenied) {
			t.Errorf("%s with 127.0.0.0/8 denied: %v, want ErrDenied", tg.Address, err)
		}
	}
}

// A forward proxy named by a host name is checked on the address it
// resolves to, when dialed, for HTTP and SOCKS5 proxies, on the request
// path (Acquire) and on the prober's (Probe): "localhost" resolves into the
// denied loopback range and the listener there never sees a connection.
func TestEndpointPolicyProxyNameResolvedAtDial(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	policy, err := (&endpointpolicy.Config{DenyCIDRs: []string{"127.0.0.0/8", "::1/128"}}).Policy()
	if err != nil {
		t.Fatal(err)
	}
	p := newTestPool(t, Config{Capacity: 8, Endpoints: policy})
	cluster := &url.URL{Scheme: "https", Host: "cluster.example:6443"} // never reached
	for _, scheme := range []string{"http", "https", "socks5"} {
		tg := &Target{Cluster: "via-" + scheme, Address: cluster, Insecure: true,
			ProxyURL: &url.URL{Scheme: scheme, Host: net.JoinHostPort("localhost", port), User: url.UserPassword("u", "p")}}
		l, err := p.Acquire(tg)
		if err == nil {
			_, _, err = get(context.Background(), l.Transport(), cluster, "/api")
			l.Release()
		}
		if !errors.Is(err, endpointpolicy.ErrDenied) {
			t.Errorf("%s proxy at localhost: %v, want ErrDenied", scheme, err)
		}
		err = p.Probe(tg, func(rt http.RoundTripper) error {
			_, _, err := get(context.Background(), rt, cluster, "/readyz")
			return err
		})
		if !errors.Is(err, endpointpolicy.ErrDenied) {
			t.Errorf("probe through the %s proxy at localhost: %v, want ErrDenied", scheme, err)
		}
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("the denied proxy address accepted %d connections", n)
	}
}

// otherIPv4Forms are ways of writing ip (an IPv4 address) that inet_aton
// (glibc's resolver, curl, most forward proxies, a Go agent built with cgo)
// reads as ip and netip reads as no address at all.
func otherIPv4Forms(ip netip.Addr) []string {
	b := ip.As4()
	v := binary.BigEndian.Uint32(b[:])
	return []string{
		strconv.FormatUint(uint64(v), 10),                        // 2130706435
		fmt.Sprintf("%d.%d", b[0], v&0xffffff),                   // 127.3
		fmt.Sprintf("%d.%d.%d", b[0], b[1], v&0xffff),            // 127.0.3
		fmt.Sprintf("0%o.%d.%d.%d", b[0], b[1], b[2], b[3]),      // 0177.0.0.3
		fmt.Sprintf("0x%x", v),                                   // 0x7f000003
		fmt.Sprintf("0%o", v),                                    // 017700000003
		fmt.Sprintf("0x%x.%d", b[0], v&0xffffff),                 // 0x7f.3
		fmt.Sprintf("0%o.%d", b[0], v&0xffffff),                  // 0177.3
		fmt.Sprintf("%d.%03d.%03d.%03d", b[0], b[1], b[2], b[3]), // 127.000.000.003
		ip.String() + ".",                                        // 127.0.0.3.
	}
}

// A host in another IPv4 form names, to a forward proxy, a denied address
// that the policy took for a DNS name: through the test proxies (which
// resolve as glibc does) "127.3" reaches 127.0.0.3. With 127.0.0.3 denied,
// each form is refused on every route (direct, HTTP and SOCKS5 proxy, and as
// the proxy's own host), when the entry is built (Acquire, Probe) and when
// it dials, with an error that names the policy; the listener at 127.0.0.3
// never sees a connection.
func TestEndpointPolicyOtherIPv4Forms(t *testing.T) {
	denied := netip.MustParseAddr("127.0.0.3")
	l, err := net.Listen("tcp", net.JoinHostPort(denied.String(), "0"))
	if err != nil {
		t.Fatalf("listening on %s (all of 127.0.0.0/8 is loopback on Linux): %v", denied, err)
	}
	defer l.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	httpProxy, _ := connectProxy(t, "u", "p")
	socksProxy, _ := socks5Proxy(t)
	forms := otherIPv4Forms(denied)
	via := func(proxy *url.URL) func(string) *Target {
		return func(host string) *Target {
			return &Target{Address: &url.URL{Scheme: "https", Host: net.JoinHostPort(host, port)}, Insecure: true, ProxyURL: proxy}
		}
	}
	// The proxy itself at such a host: its port is the listener's.
	proxyAt := func(scheme string) func(string) *Target {
		return func(host string) *Target {
			return &Target{Address: &url.URL{Scheme: "https", Host: "cluster.example:6443"}, Insecure: true,
				ProxyURL: &url.URL{Scheme: scheme, Host: net.JoinHostPort(host, port), User: url.UserPassword("u", "p")}}
		}
	}
	routes := map[string]func(string) *Target{
		"direct": via(nil), "http proxy": via(httpProxy), "socks5 proxy": via(socksProxy),
		"http proxy at": proxyAt("http"), "https proxy at": proxyAt("https"), "socks5 proxy at": proxyAt("socks5"),
	}

	// Without a policy the proxies do reach the listener by these hosts:
	// the test proves what it says.
	open := newTestPool(t, Config{Capacity: 8})
	for _, route := range []string{"http proxy", "socks5 proxy"} {
		tg := routes[route](forms[1])
		tg.Cluster = "unchecked-" + strings.ReplaceAll(route, " ", "-")
		before := accepted.Load()
		if l, err := open.Acquire(tg); err == nil {
			_, _, _ = get(context.Background(), l.Transport(), tg.Address, "/")
			l.Release()
		}
		eventually(t, route+" without a policy reaches "+denied.String()+" by "+forms[1], func() bool { return accepted.Load() > before })
	}
	baseline := accepted.Load()

	policy, err := (&endpointpolicy.Config{DenyCIDRs: []string{denied.String() + "/32"}}).Policy()
	if err != nil {
		t.Fatal(err)
	}
	p := newTestPool(t, Config{Capacity: 8, Endpoints: policy})
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, endpointpolicy.ErrDenied) || !strings.Contains(err.Error(), "endpoint policy") || !strings.Contains(err.Error(), "dotted-decimal form, "+denied.String()) {
			t.Errorf("%s: %v, want ErrDenied naming the endpoint policy and saying: write it in dotted-decimal form, %s", what, err, denied)
		}
	}
	for route, target := range routes {
		for i, host := range forms {
			tg := target(host)
			tg.Cluster = fmt.Sprintf("%s-%d", strings.ReplaceAll(route, " ", "-"), i)
			what := route + " " + host
			l, err := p.Acquire(tg)
			if err == nil {
				_, _, err = get(context.Background(), l.Transport(), tg.Address, "/")
				l.Release()
			}
			refused(what+": request", err)
			refused(what+": probe", p.Probe(tg, func(rt http.RoundTripper) error {
				_, _, err := get(context.Background(), rt, tg.Address, "/readyz")
				return err
			}))
			// The dial judges its address too, for entries built before.
			dial, err := p.rawDialerFor(tg)
			if err == nil {
				var c net.Conn
				if c, err = dial(context.Background(), "tcp", canonicalAddr(tg.Address, "443")); c != nil {
					c.Close()
				}
			}
			refused(what+": dial", err)
		}
	}
	if n := accepted.Load() - baseline; n != 0 {
		t.Fatalf("the listener on denied %s accepted %d connections", denied, n)
	}
}
