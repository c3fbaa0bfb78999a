package endpointpolicy

import (
	"errors"
	"net"
	"testing"
	"time"
)

// With loopback denied (config/deployment.yaml and the chart deny
// 127.0.0.0/8 and ::1/128), naming the unspecified address must not reach
// the gateway's own loopback listeners: on Linux a connection to 0.0.0.0 is
// made to the local host. Refused when written (CheckHost) and when dialed
// (Control), and the listener on 127.0.0.1 sees no connection.
func TestUnspecifiedAddressIsTheLocalHost(t *testing.T) {
	p, err := (&Config{DenyCIDRs: []string{"169.254.0.0/16", "127.0.0.0/8", "::1/128"}}).Policy()
	if err != nil {
		t.Fatal(err)
	}
	port, accepted := loopbackListener(t)
	for _, host := range []string{"0.0.0.0", "[::]"} {
		if err := p.CheckHost(host); !errors.Is(err, ErrDenied) {
			t.Errorf("CheckHost(%s) = %v, want ErrDenied: loopback is denied", host, err)
		}
	}
	d := &net.Dialer{Timeout: 2 * time.Second, Control: p.Control}
	c, err := d.Dial("tcp", net.JoinHostPort("0.0.0.0", port))
	if err == nil {
		c.Close()
	}
	if !errors.Is(err, ErrDenied) {
		t.Errorf("dial 0.0.0.0:%s: %v, want ErrDenied", port, err)
	}
	select {
	case <-accepted:
		t.Error("the listener on 127.0.0.1 accepted a connection dialed to 0.0.0.0 although loopback is denied")
	case <-time.After(200 * time.Millisecond):
	}
	// Without the policy the same dial does reach it: the test proves what it says.
	c, err = (&net.Dialer{Timeout: 2 * time.Second}).Dial("tcp", net.JoinHostPort("0.0.0.0", port))
	if err != nil {
		t.Fatalf("dial 0.0.0.0:%s without a policy: %v (this host does not route 0.0.0.0 to itself)", port, err)
	}
	c.Close()
	select {
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("a dial to 0.0.0.0 without a policy did not reach the listener on 127.0.0.1")
	}
}
