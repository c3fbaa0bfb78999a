package tracing

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// Tracing off is a nil *Tracer: every hook the request path calls returns
// at once and allocates nothing, and the transport is the one given.
func TestOffCostsNoAllocation(t *testing.T) {
	var tr *Tracer
	ctx := context.Background()
	h := http.Header{}
	rt := http.DefaultTransport
	if tr.WrapTransport(rt) != rt {
		t.Fatal("tracing off wrapped the transport")
	}
	err := errors.New("x")
	if n := testing.AllocsPerRun(100, func() {
		c, span := tr.Start(ctx, "s", trace.SpanKindInternal)
		tr.Inject(c, h)
		End(span, err, "failed")
	}); n != 0 {
		t.Errorf("tracing off allocates %v times per request hook, want 0", n)
	}
	if len(h) != 0 {
		t.Errorf("tracing off wrote headers: %v", h)
	}
	if New(nil) != nil {
		t.Error("New(nil) is not off")
	}
}
