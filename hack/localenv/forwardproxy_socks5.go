package localenv

import (
	"context"
	"errors"
	"log"
	"net"
	"sync"

	socks5 "github.com/armon/go-socks5"
)

// startSOCKS5Proxy serves SOCKS5 (no authentication, CONNECT only in
// practice) with github.com/armon/go-socks5, the SOCKS5 server most Go
// projects embed. Names are not resolved here: the gateway sends IPs.
func (e *Env) startSOCKS5Proxy() (*ForwardProxy, error) {
	p, err := e.newForwardProxy("socks5")
	if err != nil {
		return nil, err
	}
	srv, err := socks5.New(&socks5.Config{
		Logger:   log.New(p.logFile, "", log.LstdFlags|log.Lmicroseconds),
		Resolver: noResolver{},
		Dial:     p.dial,
	})
	if err != nil {
		p.ln.Close()
		p.logFile.Close()
		return nil, err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = srv.Serve(p.ln) }()
	p.stop = func() error {
		// Serve returns once the listener is closed; sessions end when
		// ForwardProxy.Close closes their connections.
		err := p.ln.Close()
		wg.Wait()
		if errors.Is(err, net.ErrClosed) {
			err = nil
		}
		return err
	}
	return p, nil
}

// noResolver refuses names, so the proxy never asks DNS.
type noResolver struct{}

func (noResolver) Resolve(ctx context.Context, name string) (context.Context, net.IP, error) {
	return ctx, nil, errors.New("this test SOCKS5 proxy does not resolve names; send an IP address")
}
