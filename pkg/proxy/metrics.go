package proxy

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"k8s.io/apiserver/pkg/endpoints/responsewriter"
	"k8s.io/component-base/metrics"
)

// Metrics are the proxy's request metrics. Labels are bounded: no path, no
// cluster (there may be thousands), only the status code and the kind of
// request.
type Metrics struct {
	requestsTotal   *metrics.CounterVec
	requestDuration *metrics.HistogramVec
}

// NewMetrics creates the metrics; they record once registered.
func NewMetrics() *Metrics {
	return &Metrics{
		requestsTotal: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace:      "cluster_gateway",
			Subsystem:      "proxy",
			Name:           "requests_total",
			Help:           "Proxied requests by HTTP status code and kind (request: ordinary; stream: watch, logs -f and other long-running; upgrade: exec, attach, port-forward).",
			StabilityLevel: metrics.ALPHA,
		}, []string{"code", "kind"}),
		requestDuration: metrics.NewHistogramVec(&metrics.HistogramOpts{
			Namespace:      "cluster_gateway",
			Subsystem:      "proxy",
			Name:           "request_duration_seconds",
			Help:           "Time from receiving a proxied request to its end, by kind; for streams this is the session length.",
			Buckets:        []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800},
			StabilityLevel: metrics.ALPHA,
		}, []string{"kind"}),
	}
}

// Register adds the metrics to r (the server's registry).
func (m *Metrics) Register(r metrics.KubeRegistry) {
	r.MustRegister(m.requestsTotal, m.requestDuration)
}

// statusRecorder remembers the status code, keeping the writer's
// Flusher, CloseNotifier and Hijacker (upgrades need them).
type statusRecorder struct {
	http.ResponseWriter
	code int

	m     *Metrics
	req   *http.Request
	kind  string
	start time.Time
	bound writeBound // started for ordinary requests only
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *statusRecorder) WriteHeader(code int) {
	// An informational answer (103 Early Hints) is not the status: the final
	// one follows, or the timeout's 504 must still be written.
	if r.code == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		r.code = code
		r.bound.begin()
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
		r.bound.begin()
	}
	return r.ResponseWriter.Write(b)
}

// instrumentInto wraps w in rec, which the caller allocated; rec's done
// records the request's outcome.
func (m *Metrics) instrumentInto(rec *statusRecorder, w http.ResponseWriter, req *http.Request, kind string) (http.ResponseWriter, *statusRecorder) {
	*rec = statusRecorder{ResponseWriter: w, m: m, req: req, kind: kind, start: time.Now()}
	if _, hijacks := w.(http.Hijacker); !hijacks {
		if _, ok := w.(responsewriter.CloseNotifierFlusher); ok {
			// HTTP/2: what WrapForHTTP1Or2 would add, rec has itself,
			// without an allocation per request.
			return rec, rec
		}
	}
	return responsewriter.WrapForHTTP1Or2(rec), rec
}

// Flush and CloseNotify are the writer's, for an HTTP/2 writer that is not
// wrapped (instrumentInto).
func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *statusRecorder) CloseNotify() <-chan bool {
	if cn, ok := r.ResponseWriter.(http.CloseNotifier); ok { //nolint:staticcheck // the generic server's writers keep it; so must a wrapper
		return cn.CloseNotify()
	}
	return nil
}

// done records the request's outcome; call it once, when serving ends.
func (r *statusRecorder) done() {
	code := r.code
	if code == 0 {
		// Hijacked (upgrade), past its deadline without an answer (a
		// timeout filter in front answered it; the gateway's own chain
		// leaves that to answerTimeout, which has set the code), or the
		// client left before any answer.
		switch {
		case r.kind == kindUpgrade:
			code = http.StatusSwitchingProtocols
		case errors.Is(r.req.Context().Err(), context.DeadlineExceeded):
			code = http.StatusGatewayTimeout
		default:
			code = 499
		}
	}
	r.m.requestsTotal.WithLabelValues(codeLabel(code), r.kind).Inc()
	r.m.requestDuration.WithLabelValues(r.kind).Observe(time.Since(r.start).Seconds())
}

// codeLabel is strconv.Itoa without an allocation for the usual codes.
func codeLabel(code int) string {
	switch code {
	case http.StatusOK:
		return "200"
	case http.StatusCreated:
		return "201"
	case http.StatusSwitchingProtocols:
		return "101"
	case http.StatusNotFound:
		return "404"
	}
	return strconv.Itoa(code)
}
