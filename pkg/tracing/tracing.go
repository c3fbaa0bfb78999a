// Package tracing is the gateway's own spans: the client span of the round
// trip to a cluster (whose context goes on in traceparent) and the spans of
// the steps before it. A nil *Tracer is tracing off: every method returns
// at once, without allocating, so the proxy path pays nothing for it.
package tracing

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	cbtracing "k8s.io/component-base/tracing"
)

// Attribute keys of the gateway's spans. Values never hold a credential, a
// header or a body: a cluster's name, the inner request's verb and
// resource, a route, an address.
const (
	Cluster  = attribute.Key("cluster_gateway.cluster")
	Verb     = attribute.Key("cluster_gateway.verb")
	Resource = attribute.Key("cluster_gateway.resource")
	Route    = attribute.Key("cluster_gateway.route")   // direct, proxy, konnectivity
	Address  = attribute.Key("cluster_gateway.address") // host:port dialed (a proxy URL without user info)
	Provider = attribute.Key("cluster_gateway.credential_provider")
	Outcome  = attribute.Key("cluster_gateway.outcome")
)

// Routes of a new connection's dial (the Route attribute).
const (
	RouteDirect       = "direct"
	RouteProxy        = "proxy"
	RouteKonnectivity = "konnectivity"
)

// Tracer makes the gateway's spans; nil is tracing off.
type Tracer struct {
	tp     trace.TracerProvider
	tracer trace.Tracer
	wrap   func(http.RoundTripper) http.RoundTripper
	prop   propagation.TextMapPropagator
}

// New returns a Tracer over tp; nil tp returns nil (off).
func New(tp trace.TracerProvider) *Tracer {
	if tp == nil {
		return nil
	}
	return &Tracer{
		tp:     tp,
		tracer: tp.Tracer("github.com/clustergateway/cluster-gateway"),
		wrap:   cbtracing.WrapperFor(tp),
		prop:   cbtracing.Propagators(),
	}
}

// NoExporter is a provider that samples and records every span and
// exports none: for make bench's A/B row of what tracing costs the gateway
// itself, the export aside.
func NoExporter() *sdktrace.TracerProvider { return sdktrace.NewTracerProvider() }

var noSpan = trace.SpanFromContext(context.Background()) // a no-op span

// Start starts a span named name under ctx's; with tracing off it returns
// ctx and a no-op span.
func (t *Tracer) Start(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if t == nil {
		return ctx, noSpan
	}
	return t.tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// WrapTransport gives rt a client span per round trip (kube-aggregator's
// wrapper, k8s.io/component-base/tracing.WrapperFor), which sends its
// context in traceparent; with tracing off it returns rt.
func (t *Tracer) WrapTransport(rt http.RoundTripper) http.RoundTripper {
	if t == nil {
		return rt
	}
	return t.wrap(rt)
}

// Inject writes ctx's span context to h (traceparent): for a request that
// is written to the wire without a round tripper (an upgrade).
func (t *Tracer) Inject(ctx context.Context, h http.Header) {
	if t == nil {
		return
	}
	t.prop.Inject(ctx, propagation.HeaderCarrier(h))
}

// End ends span, marking it failed with err's presence (not its text,
// which may quote what a cluster or a proxy answered).
func End(span trace.Span, err error, failure string) {
	if err != nil {
		span.SetStatus(codes.Error, failure)
	}
	span.End()
}
