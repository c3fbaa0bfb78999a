package proxy

import (
	"fmt"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/clusters"
	"github.com/clustergateway/cluster-gateway/pkg/fairness"
	"github.com/clustergateway/cluster-gateway/pkg/health"
	"github.com/clustergateway/cluster-gateway/pkg/pool"
	"github.com/clustergateway/cluster-gateway/pkg/tracing"
)

// codecs encode the Status objects of errors; metav1 types are enough.
var codecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return serializer.NewCodecFactory(s)
}()

// Config configures the proxy: what it works with, and the values the
// assembler copies from the flags (defined in cmd/apiserver/app/options).
type Config struct {
	// Clusters holds each cluster's record: the proxy reads gateways and
	// leases transports through it.
	Clusters *clusters.Owner
	// Pool is the records' pool; the proxy probes through it.
	Pool *pool.Pool
	// Health is what the prober knows (the assembler builds it, probing
	// through ProbeCluster): a cluster known to be unreachable fails at
	// once with 503, and a request that cannot reach its cluster asks for
	// a probe now. nil: no prober.
	Health Health
	// Authorizer is the hub's (delegated) authorizer. It is required: exec,
	// attach and port-forward also need create on clustergateways/proxy.
	Authorizer authorizer.Authorizer
	// AuthorizeSubpath also authorizes the inner request (verb, resource,
	// namespace, name or non-resource path) for the hub caller.
	AuthorizeSubpath bool
	// DialTimeout and ResponseHeaderTimeout (the pool's) together bound
	// setting up an upgrade (exec, attach, port-forward), whose connection
	// UpgradeAwareHandler dials and reads itself.
	DialTimeout           time.Duration
	ResponseHeaderTimeout time.Duration
	// Limiter bounds each cluster's requests in flight and queues the rest
	// fairly among callers, with the Slots the cluster's record keeps: it
	// must be the records' (clusters.Config.Limiter); nil: no per-cluster
	// bound.
	Limiter *fairness.Limiter
	// MaxBodyBytes is how much of an ordinary request's body is read
	// before the request takes a cluster slot (the generic server's
	// MaxRequestBodyBytes); 0: none, the body streams with the slot taken.
	MaxBodyBytes int64
	// Tracer makes the spans of the fairness wait, the pool lease, an
	// upgrade's setup and the probe, and gives the hub's server span the
	// cluster, verb and resource; nil (no --tracing-config-file): none.
	// The pool's Config.Tracer makes the round trips' client spans.
	Tracer *tracing.Tracer
}

func (p *Proxy) upgradeSetupTimeout() time.Duration {
	if d := p.opts.DialTimeout + p.opts.ResponseHeaderTimeout; d > 0 {
		return d
	}
	return 40 * time.Second
}

// Health is the prober's view of the clusters (pkg/health's Prober).
type Health interface {
	Get(name string) (health.Result, bool)
	ProbeNow(name string)
	Interval() time.Duration
}

// Proxy serves the proxy subresource. It keeps no state of its own about
// gateways: it reads them and leases transports through their records.
type Proxy struct {
	opts    Config
	health  Health // nil without a prober
	metrics *Metrics
	streams *streams
	reverse *httputil.ReverseProxy // every ordinary request's, see forward.go
	watches *httputil.ReverseProxy // every watch's: the same, with smaller copy buffers
}

// New returns the proxy. Clusters, Pool and Authorizer are required.
func New(opts Config) (*Proxy, error) {
	switch {
	case opts.Clusters == nil, opts.Pool == nil:
		return nil, fmt.Errorf("proxy: Config.Clusters and Config.Pool are required")
	case opts.Authorizer == nil:
		return nil, fmt.Errorf("proxy: Config.Authorizer is required (exec, attach and port-forward are authorized as create)")
	case opts.Limiter != opts.Clusters.Limiter():
		return nil, fmt.Errorf("proxy: Config.Limiter must be the one the clusters' records keep Slots of (clusters.Config.Limiter)")
	}
	p := &Proxy{opts: opts, metrics: NewMetrics(), streams: newStreams(),
		reverse: newReverseProxy(newCopyBuffers()), watches: newReverseProxy(newWatchCopyBuffers())}
	if opts.Health != nil {
		p.health = opts.Health
	}
	return p, nil
}

// Metrics are the proxy's request metrics, to register with the server's registry.
func (p *Proxy) Metrics() *Metrics { return p.metrics }

// Handler is Serve as the handler of one request, for the REST handler's
// connect (which the route leaves only what it cannot place).
func (p *Proxy) Handler(name, subpath string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		p.Serve(w, req, name, subpath)
	})
}

// Serve serves one proxied request for the named gateway. It is the hub
// side: it parses the inner request, authorizes the caller, audits the
// request and takes a slot of the cluster's fair share, then hands the
// request to the cluster side (toCluster, cluster.go) in one call, which
// answers it. subpath is the path on the managed cluster; the query is the
// request's as sent. pkg/fanout calls it in process for each cluster of a set.
func (p *Proxy) Serve(w http.ResponseWriter, req *http.Request, name, subpath string) {
	// The inner request, parsed once per request (memo.go), serves the
	// metrics label, the subpath authorization and the watch handling.
	inner := subpath
	if !strings.HasPrefix(inner, "/") {
		inner = "/" + inner
	}
	parsed := parseInner(req, nil, inner)
	in, inErr, kind := parsed.in, parsed.err, parsed.kind
	auditInner(req.Context(), name, subpath, in)
	upgrade := httpstream.IsUpgradeRequest(req)
	w, rec := p.metrics.instrumentInto(new(statusRecorder), w, req, kind)
	defer rec.done()
	if kind == kindRequest {
		rec.bound.start(rec.ResponseWriter, req.Context())
		defer answerTimeout(w, req, rec) // before done records the code
	}
	if err := checkSubpath(subpath); err != nil {
		writeStatus(w, req, err)
		return
	}
	u, ok := apirequest.UserFrom(req.Context())
	if !ok {
		writeStatus(w, req, apierrors.NewInternalError(fmt.Errorf("no hub user on the request")))
		return
	}
	if upgrade {
		if err := p.authorizeUpgrade(req.Context(), u, name); err != nil {
			writeStatus(w, req, err)
			return
		}
	}
	cl, err := p.opts.Clusters.Take(req.Context(), name)
	if err != nil {
		writeStatus(w, req, err)
		return
	}
	gw := cl.Gateway()
	if !gw.Ready {
		writeStatus(w, req, statusError(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
			fmt.Sprintf("ClusterGateway %q cannot be used: %s", name, gw.Problem)))
		return
	}
	if err := p.knownUnreachable(w, name); err != nil {
		writeStatus(w, req, err)
		return
	}
	if err := p.authorizeInner(req, u, subpath, in, inErr, upgrade); err != nil {
		writeStatus(w, req, err)
		return
	}
	if err := callerProblem(gw, u); err != nil {
		writeStatus(w, req, err)
		return
	}
	if kind == kindRequest {
		read, err := readBody(w, req, p.opts.MaxBodyBytes)
		if read == nil {
			if err != nil {
				writeStatus(w, req, err)
			}
			return
		}
		req = read
	}
	var attrs []attribute.KeyValue
	if tr := p.opts.Tracer; tr != nil {
		attrs = spanAttributes(name, in)
		trace.SpanFromContext(req.Context()).SetAttributes(attrs...)
	}
	_, span := p.opts.Tracer.Start(req.Context(), "cluster-gateway.fairness.wait", trace.SpanKindInternal, attrs...)
	release, err := p.opts.Limiter.Acquire(req.Context(), cl.Slots(), u.GetName(), limitKind(kind))
	tracing.End(span, err, "refused or abandoned")
	if err != nil {
		if req.Context().Err() == nil { // else nobody is listening
			writeStatus(w, req, err)
		}
		return
	}
	defer release()
	p.toCluster(w, req, clusterCall{cluster: cl, caller: u, subpath: subpath, watch: isWatch(in), upgrade: upgrade, attrs: attrs})
}

func joinPath(base, sub string) string {
	base = strings.TrimSuffix(base, "/")
	if sub == "" {
		return base + "/"
	}
	if !strings.HasPrefix(sub, "/") {
		sub = "/" + sub
	}
	return base + sub
}

// knownUnreachable fails a request at once when the prober knows its cluster
// cannot be reached or does not answer, rather than letting it wait out the
// dial or response timeout; probing goes on, and the first good probe lets
// requests through again.
func (p *Proxy) knownUnreachable(w http.ResponseWriter, name string) error {
	if p.health == nil {
		return nil
	}
	r, ok := p.health.Get(name)
	// Only what would make a request wait: no connection, or no answer. A
	// cluster with an untrusted certificate or an unhealthy /readyz answers
	// at once, and may still serve the request.
	if !ok || r.Status != metav1.ConditionFalse || (r.Reason != v1alpha1.ReasonDialFailed && r.Reason != v1alpha1.ReasonNoAnswer) {
		return nil
	}
	retry := max(1, int(p.health.Interval().Seconds()))
	w.Header().Set("Retry-After", strconv.Itoa(retry))
	return statusError(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, fmt.Sprintf(
		"cluster %q is unreachable (Reachable=False since %s: %s: %s); the gateway probes it and lets requests through again once it answers",
		name, r.LastTransitionTime.UTC().Format(time.RFC3339), r.Reason, r.Message))
}

// spanAttributes are the cluster and the inner request's verb and resource
// (with its subresource), as the managed cluster sees them.
func spanAttributes(cluster string, in *apirequest.RequestInfo) []attribute.KeyValue {
	attrs := []attribute.KeyValue{tracing.Cluster.String(cluster)}
	if in != nil {
		attrs = append(attrs, tracing.Verb.String(in.Verb))
		if in.IsResourceRequest {
			attrs = append(attrs, tracing.Resource.String(strings.Trim(in.Resource+"/"+in.Subresource, "/")))
		}
	}
	return attrs
}
