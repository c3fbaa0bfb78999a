package konnectivity

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/clustergateway/cluster-gateway/internal/testfrontend"
)

// BenchmarkTunnelledRequest sends GETs on one HTTP/2 connection through a
// real proxy-server and agent, as the pool does, 8 at a time. "sender" is
// the Manager's connection; "caller" the same connection writing on its
// callers' goroutines (as konnectivity-client's conn does), to show what the
// sender saves. cpu-ns/op is this process's CPU (the client, the tunnel's
// gRPC and the in-process backend) per request; the proxy-server and agent
// are other processes.
//
//	KONNECTIVITY_BIN=$PWD/_output/bin go test -run '^$' -bench TunnelledRequest -count 5 ./pkg/pool/konnectivity/
func BenchmarkTunnelledRequest(b *testing.B) {
	s := newStack(b)
	backend := startH2Backend(b, s)
	m := startManager(b, s.config())
	for _, mode := range []string{"sender", "caller"} {
		b.Run(mode, func(b *testing.B) {
			dial := m.DialContext
			if mode == "caller" {
				dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
					c, err := m.DialContext(ctx, network, addr)
					if err != nil {
						return nil, err
					}
					return callerWrites{c.(*trackedConn)}, nil
				}
			}
			tr := &http2.Transport{
				TLSClientConfig: s.backendTLS(),
				DialTLSContext: func(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
					c, err := dial(ctx, network, addr)
					if err != nil {
						return nil, err
					}
					tc := tls.Client(c, cfg)
					if err := tc.HandshakeContext(ctx); err != nil {
						_ = c.Close()
						return nil, err
					}
					return tc, nil
				},
			}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: 20 * time.Second}
			url := "https://" + backend + "/"
			get := func() error { return testfrontend.Get(context.Background(), client, url) }
			if err := get(); err != nil { // the connection, before the clock
				b.Fatal(err)
			}
			start := cpuTime()
			testfrontend.GetInParallel(b, get)
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// callerWrites writes on its caller's goroutine, bypassing the sender.
type callerWrites struct{ *trackedConn }

func (c callerWrites) Write(p []byte) (int, error) { return c.trackedConn.Conn.Write(p) }

// startH2Backend serves a small answer over HTTP/2, as a kube-apiserver
// does, on the stack's backend address.
func startH2Backend(b *testing.B, s *stack) string {
	cert, key := issue(b, s.backendCA, "managed-apiserver", backendIP)
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(backendIP, "0"))
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"default"}}`)
	srv := &httptest.Server{Listener: ln, EnableHTTP2: true, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})}}
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.StartTLS()
	b.Cleanup(srv.Close)
	return ln.Addr().String()
}

// cpuTime is this process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
