package proxy

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// h2Writer is what the generic server hands the proxy for an HTTP/2
// request: a Flusher and CloseNotifier that cannot be hijacked.
type h2Writer struct {
	*httptest.ResponseRecorder
	closed  chan bool
	flushes int
}

func (w *h2Writer) Flush()                   { w.flushes++ }
func (w *h2Writer) CloseNotify() <-chan bool { return w.closed }

// h1Writer can be hijacked too, as an HTTP/1.1 writer can.
type h1Writer struct{ *h2Writer }

func (w h1Writer) Hijack() (net.Conn, *bufio.ReadWriter, error) { return nil, nil, nil }

// The instrumented writer keeps the writer's optional interfaces (streams
// flush through it, upgrades hijack through it), records the status, and
// costs an HTTP/2 request no allocation.
func TestInstrumentedWriterKeepsInterfaces(t *testing.T) {
	m := NewMetrics()
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	for _, tc := range []struct {
		name    string
		w       http.ResponseWriter
		hijacks bool
	}{
		{"http2", &h2Writer{ResponseRecorder: httptest.NewRecorder(), closed: make(chan bool)}, false},
		{"http1", h1Writer{&h2Writer{ResponseRecorder: httptest.NewRecorder(), closed: make(chan bool)}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rec statusRecorder
			w, _ := m.instrumentInto(&rec, tc.w, req, kindRequest)
			f, ok := w.(http.Flusher)
			if !ok {
				t.Fatal("the instrumented writer is not a Flusher")
			}
			f.Flush()
			inner := tc.w.(interface{ CloseNotify() <-chan bool })
			cn, ok := w.(http.CloseNotifier) //nolint:staticcheck // the generic server's writers keep it
			if !ok || cn.CloseNotify() != inner.CloseNotify() {
				t.Fatal("the instrumented writer does not pass on the writer's CloseNotify")
			}
			if _, ok := w.(http.Hijacker); ok != tc.hijacks {
				t.Fatalf("the instrumented writer is a Hijacker: %v, want %v", ok, tc.hijacks)
			}
			w.WriteHeader(http.StatusTeapot)
			if rec.code != http.StatusTeapot {
				t.Fatalf("recorded code %d, want %d", rec.code, http.StatusTeapot)
			}
			var flushes int
			switch iw := tc.w.(type) {
			case *h2Writer:
				flushes = iw.flushes
			case h1Writer:
				flushes = iw.flushes
			}
			if flushes != 1 {
				t.Fatalf("the writer was flushed %d times, want 1", flushes)
			}
		})
	}
	h2 := &h2Writer{ResponseRecorder: httptest.NewRecorder(), closed: make(chan bool)}
	var rec statusRecorder
	if n := testing.AllocsPerRun(100, func() { _, _ = m.instrumentInto(&rec, h2, req, kindRequest) }); n != 0 {
		t.Fatalf("instrumenting an HTTP/2 writer allocates %v times, want 0", n)
	}
}
