package konnectivity

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clustergateway/cluster-gateway/internal/testpoll"
	"github.com/clustergateway/cluster-gateway/pkg/endpointpolicy"
)

// The agent dials what the tunnel is asked for and resolves it itself: a
// proxy-agent built with cgo and using its resolver (as glibc's
// getaddrinfo does) reads 127.4, 2130706436 or 0x7f000004 as 127.0.0.4. With
// 127.0.0.4 denied, the Manager refuses those hosts and the literal itself
// before the agent is asked, with an error naming the policy, and a listener
// there sees no connection; without a policy the same dial reaches it.
func TestDialJudgesTheAddressAsWritten(t *testing.T) {
	// proxy-agent inherits it: its Go resolver would look these up in DNS.
	t.Setenv("GODEBUG", "netdns=cgo")
	s := newStack(t)
	const denied = "127.0.0.4"
	l, err := net.Listen("tcp", denied+":0")
	if err != nil {
		t.Fatalf("listening on %s (all of 127.0.0.0/8 is loopback on Linux): %v", denied, err)
	}
	var accepted atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	defer func() { l.Close(); <-done }()
	_, port, _ := net.SplitHostPort(l.Addr().String())

	// Without a policy the agent reaches the listener by "127.4": the test
	// proves what it says.
	open := startManager(t, s.config())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := open.DialContext(ctx, "tcp", net.JoinHostPort("127.4", port))
	if err != nil {
		t.Fatalf("dial 127.4:%s through the tunnel without a policy: %v (the agent must resolve it as glibc does)", port, err)
	}
	c.Close()
	testpoll.Eventually(t, 10*time.Second, "the listener accepts the tunnelled connection", func() error {
		if accepted.Load() == 0 {
			return errors.New("none yet")
		}
		return nil
	})
	open.Stop()
	baseline := accepted.Load()

	opts := s.config()
	if opts.Endpoints, err = (&endpointpolicy.Config{DenyCIDRs: []string{denied + "/32"}}).Policy(); err != nil {
		t.Fatal(err)
	}
	m := startManager(t, opts)
	for _, host := range []string{"127.4", "2130706436", "0x7f000004", "0177.0.0.4", "127.0.4", "127.0.0.4.", denied} {
		c, err := m.DialContext(ctx, "tcp", net.JoinHostPort(host, port))
		if c != nil {
			c.Close()
		}
		if !errors.Is(err, endpointpolicy.ErrDenied) || !strings.Contains(err.Error(), "endpoint policy") {
			t.Errorf("dial %s through the tunnel with %s denied: %v, want ErrDenied naming the endpoint policy", host, denied, err)
		} else if host != denied && !strings.Contains(err.Error(), "dotted-decimal form, "+denied) {
			t.Errorf("dial %s: %v, want it to say: write it in dotted-decimal form, %s", host, err, denied)
		}
	}
	// A dial the agent made returns once it has connected; the accept loop
	// gets a moment to count it.
	time.Sleep(200 * time.Millisecond)
	if n := accepted.Load() - baseline; n != 0 {
		t.Fatalf("the listener on denied %s accepted %d connections through the tunnel", denied, n)
	}
}
