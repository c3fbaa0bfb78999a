package konnectivity

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	clientproto "sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
)

// Why a health check of our own: a proxy-server that stops answering
// without closing its connection (a frozen process, a dropped route) is
// noticed by nothing else within minutes. gRPC keepalive would, but the
// proxy-server enforces grpc's default policy on its clients (pings at most
// every 5 minutes) and closes a connection that pings more often; and it
// serves no gRPC health service. So each tunnel asks its proxy-server, over
// its own gRPC connection, for a round trip that the proxy-server answers
// itself, with no agent involved: a CLOSE_REQ on a stream that dialed
// nothing is answered with a CLOSE_RSP.

// healthLoop checks the current tunnel on each tick of ticker. One that does
// not answer within HealthTimeout takes no new dials (they go to the other
// proxy-servers) until it answers again; once it has missed
// HealthFailureThreshold checks in a row it is marked lost, so its rebuild
// loop closes it at once (its conns end with an error) and builds a new one.
func (s *server) healthLoop(ctx context.Context, ticker clock.Ticker) {
	defer s.m.wg.Done()
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
		t := s.checked()
		if t == nil {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, s.m.opts.HealthTimeout)
		err := t.probe(pctx)
		cancel()
		if ctx.Err() != nil {
			continue
		}
		if err == nil {
			if t.missed.Swap(0) > 0 {
				klog.InfoS("Konnectivity proxy-server answers its health check again; its tunnel takes new dials", "proxyServer", s.addr)
			}
			continue
		}
		if dead, _, _ := t.health(); dead {
			continue // ended meanwhile, for its own reason
		}
		cause := fmt.Errorf("proxy-server %s did not answer a health check within %v: %w", s.addr, s.m.opts.HealthTimeout, err)
		missed := int(t.missed.Add(1))
		if fn := s.m.onMissedCheck.Load(); fn != nil && missed == 1 {
			// Not in this loop: closing connections through the silent
			// tunnel may wait for it. Owned like the loop, so Stop waits.
			s.m.wg.Add(1)
			go func() {
				defer s.m.wg.Done()
				(*fn)(s.addr)
			}()
		}
		if missed < s.m.opts.HealthFailureThreshold {
			klog.ErrorS(cause, "New dials go to the other proxy-servers until it answers; its tunnel and streams stay", "proxyServer", s.addr, "missed", missed, "threshold", s.m.opts.HealthFailureThreshold)
			continue
		}
		s.healthFailures.Add(1)
		klog.ErrorS(cause, "Closing the konnectivity tunnel; its streams end and new dials go to the other proxy-servers until it is rebuilt", "proxyServer", s.addr, "missed", missed)
		t.markDead(fmt.Errorf("%w (%d in a row)", cause, missed), true)
	}
}

// probe makes the round trip described above on t's gRPC connection. Any
// answer proves the proxy-server alive, whatever it says (another version
// may answer the CLOSE_REQ otherwise, or end the stream); only silence,
// or a connection grpc reports gone, fails it.
func (t *tunnel) probe(ctx context.Context) error {
	cc := t.cc.Load()
	if cc == nil {
		return nil // never captured (see holdClientConn): nothing to check with
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream if the server did not
	stream, err := clientproto.NewProxyServiceClient(cc).Proxy(ctx)
	if err != nil {
		return noAnswer(err)
	}
	req := &clientproto.Packet{Type: clientproto.PacketType_CLOSE_REQ,
		Payload: &clientproto.Packet_CloseRequest{CloseRequest: &clientproto.CloseRequest{}}}
	if err := stream.Send(req); err != nil && !errors.Is(err, io.EOF) {
		return noAnswer(err)
	}
	if _, err := stream.Recv(); err != nil && !errors.Is(err, io.EOF) {
		return noAnswer(err)
	}
	_ = stream.CloseSend()
	return nil
}

// noAnswer keeps the errors that mean the proxy-server did not answer; a
// status it sent (say Unimplemented) is an answer.
func noAnswer(err error) error {
	switch status.Code(err) {
	case codes.DeadlineExceeded, codes.Canceled, codes.Unavailable:
		return err
	}
	return nil
}

var errCaptured = errors.New("gRPC connection captured for health checks; no stream opened")

// captureClientConn is the tunnel's stream interceptor. konnectivity-client
// keeps the gRPC connection of a ReusableTunnel to itself; holdClientConn
// borrows it once, through a stream that is never opened.
func (t *tunnel) captureClientConn(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if t.capturing.Load() {
		t.cc.Store(cc)
		return nil, errCaptured
	}
	return streamer(ctx, desc, cc, method, opts...)
}

// holdClientConn runs once, right after the build, before anyone else may
// dial through t; timeout bounds it should the interceptor not be called.
func (t *tunnel) holdClientConn(timeout time.Duration) {
	t.capturing.Store(true)
	defer t.capturing.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if c, err := t.rt.DialContext(ctx, "tcp", "health-check.invalid:0"); err == nil {
		_ = c.Close() // cannot happen: the interceptor refused the stream
	}
}
