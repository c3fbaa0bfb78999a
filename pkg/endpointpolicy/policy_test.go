package endpointpolicy

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestPolicy(t *testing.T) {
	def, err := DefaultConfig().Policy()
	if err != nil {
		t.Fatal(err)
	}
	allowOnly, err := (&Config{AllowCIDRs: []string{"10.0.0.0/8", "127.0.0.0/8"}, DenyCIDRs: []string{"10.9.0.0/16"}}).Policy()
	if err != nil {
		t.Fatal(err)
	}
	// As config/deployment.yaml and the chart ship it.
	loopbackDenied, err := (&Config{DenyCIDRs: []string{"169.254.0.0/16", "127.0.0.0/8", "::1/128"}}).Policy()
	if err != nil {
		t.Fatal(err)
	}
	tenOnly, err := (&Config{AllowCIDRs: []string{"10.0.0.0/8"}}).Policy()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		p      *Policy
		ip     string
		denied bool
	}{
		// The unspecified address reaches the local host: judged as loopback.
		{loopbackDenied, "0.0.0.0", true},
		{loopbackDenied, "::", true},
		{loopbackDenied, "::ffff:0.0.0.0", true},
		{tenOnly, "0.0.0.0", true},
		{def, "0.0.0.0", false},
		{allowOnly, "0.0.0.0", false},
		{def, "169.254.169.254", true},
		{def, "::ffff:169.254.169.254", true}, // IPv4-mapped
		{def, "fe80::1%eth0", true},           // zoned link-local
		{def, "fd00:ec2::254", true},
		{def, "127.0.0.2", false},
		{def, "10.1.2.3", false},
		{def, "2001:db8::1", false},
		{allowOnly, "10.1.2.3", false},
		{allowOnly, "10.9.1.1", true}, // deny wins
		{allowOnly, "192.168.1.1", true},
		{nil, "169.254.169.254", false},
	} {
		err := tc.p.Check(netip.MustParseAddr(tc.ip))
		if (err != nil) != tc.denied || (err != nil && !errors.Is(err, ErrDenied)) {
			t.Errorf("Check(%s) = %v, want denied=%v", tc.ip, err, tc.denied)
		}
	}
	if err := def.CheckHost("[fe80::1]"); err == nil {
		t.Error("CheckHost of a bracketed link-local literal passed")
	}
	if err := def.CheckHost("metadata.example"); err != nil {
		t.Errorf("CheckHost of a name: %v (names are checked when dialed)", err)
	}
	if _, err := (&Config{DenyCIDRs: []string{"169.254.0.0"}}).Policy(); err == nil || !strings.Contains(err.Error(), "--endpoint-deny-cidrs") {
		t.Errorf("a bad CIDR: %v, want an error naming the flag", err)
	}
	if p, err := (&Config{DenyCIDRs: []string{""}}).Policy(); err != nil || p.Check(netip.MustParseAddr("169.254.169.254")) != nil {
		t.Errorf("an empty deny list must deny nothing: %v", err)
	}
}

// Control refuses a dial to a denied address that a name resolved to, before
// any connection is made.
func TestControlAfterResolution(t *testing.T) {
	port, accepted := loopbackListener(t)
	p, _ := (&Config{DenyCIDRs: []string{"127.0.0.1/32", "::1/128"}}).Policy()
	d := &net.Dialer{Timeout: 2 * time.Second, Control: p.Control}
	if c, err := d.Dial("tcp", net.JoinHostPort("localhost", port)); err == nil || !errors.Is(err, ErrDenied) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dial localhost: %v, want ErrDenied", err)
	}
	select {
	case <-accepted:
		t.Fatal("the denied address accepted a connection")
	case <-time.After(100 * time.Millisecond):
	}
}

// loopbackListener listens on 127.0.0.1 until the test ends; accepted gets a
// value for the first connection it accepts.
func loopbackListener(t *testing.T) (port string, accepted <-chan struct{}) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ch := make(chan struct{}, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			ch <- struct{}{}
			c.Close()
		}
	}()
	_, port, _ = net.SplitHostPort(l.Addr().String())
	return port, ch
}
