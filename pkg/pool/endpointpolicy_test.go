package pool

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
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
	policy, err := (&endpointpolicy.Options{DenyCIDRs: []string{"169.254.0.0/16", "127.0.0.0/8", "::1/128"}}).Policy()
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
	if err := send(newTestPool(t, Options{Capacity: 8}), unspecified); err != nil {
		t.Fatalf("https://0.0.0.0:%s without a policy: %v, want the upstream's answer", port, err)
	}
	p := newTestPool(t, Options{Capacity: 8, Endpoints: policy})
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
	policy, err := (&endpointpolicy.Options{DenyCIDRs: []string{"127.0.0.0/8", "::1/128"}}).Policy()
	if err != nil {
		t.Fatal(err)
	}
	p := newTestPool(t, Options{Capacity: 8, Endpoints: policy})
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
