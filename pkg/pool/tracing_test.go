package pool

import (
	"context"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/clustergateway/cluster-gateway/pkg/tracing"
)

// With a Tracer, a lease's round trip has a client span under the
// caller's, and the new connection's dial a span under that, naming its
// route: direct, an HTTP or SOCKS5 proxy, or a tunnel (konnectivity). No
// attribute names the proxy's password or the client key.
func TestTracedRoundTripAndDialByRoute(t *testing.T) {
	u := newUpstream(t)
	httpProxy, _ := connectProxy(t, "gw", "s3cret")
	socksProxy, _ := socks5Proxy(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	p := newTestPool(t, Config{DialTimeout: 5 * time.Second, Tracer: tracing.New(tp)})

	for _, c := range []struct{ cluster, route string }{
		{"direct", tracing.RouteDirect}, {"via-http", tracing.RouteProxy}, {"via-socks", tracing.RouteProxy}, {"via-tunnel", tracing.RouteKonnectivity},
	} {
		tg := u.target(t, c.cluster, "client")
		switch c.cluster {
		case "via-http":
			tg.ProxyURL = httpProxy
		case "via-socks":
			tg.ProxyURL = socksProxy
		case "via-tunnel":
			tg.Tunnel, tg.TunnelID = &countingDialer{}, "tunnel-1"
		}
		l := acquire(t, p, tg)
		ctx, parent := tp.Tracer("test").Start(context.Background(), "server")
		if _, _, err := get(ctx, l.Transport(), u.url, "/hello"); err != nil {
			t.Fatalf("%s: %v", c.cluster, err)
		}
		parent.End()
		l.Release()

		var client, dial sdktrace.ReadOnlySpan
		for _, s := range rec.Ended() {
			if s.SpanContext().TraceID() != parent.SpanContext().TraceID() {
				continue
			}
			switch {
			case s.SpanKind() == trace.SpanKindClient:
				client = s
			case s.Name() == "cluster-gateway.dial":
				dial = s
			}
		}
		if client == nil || client.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Fatalf("%s: no client span under the caller's", c.cluster)
		}
		if dial == nil {
			t.Fatalf("%s: no dial span in the request's trace", c.cluster)
		}
		var route, cluster string
		for _, a := range dial.Attributes() {
			switch a.Key {
			case tracing.Route:
				route = a.Value.AsString()
			case tracing.Cluster:
				cluster = a.Value.AsString()
			}
		}
		if route != c.route || cluster != c.cluster || dial.Parent().SpanID() != client.SpanContext().SpanID() {
			t.Errorf("%s: dial span route %q cluster %q parent %s; want %q, %q and the client span", c.cluster, route, cluster, dial.Parent().SpanID(), c.route, c.cluster)
		}
	}
	for _, s := range rec.Ended() {
		for _, a := range s.Attributes() {
			if v := a.Value.Emit(); strings.Contains(v, "s3cret") || strings.Contains(v, "PRIVATE KEY") {
				t.Errorf("span %s attribute %s holds a credential: %q", s.Name(), a.Key, v)
			}
		}
	}
}
