package proxy

import (
	"context"
	"errors"
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
	utilnet "k8s.io/apimachinery/pkg/util/net"
	utilproxy "k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/clusters"
	"github.com/clustergateway/cluster-gateway/pkg/endpointpolicy"
	"github.com/clustergateway/cluster-gateway/pkg/fairness"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
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

// Options configure the proxy.
type Options struct {
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
	// fairly among callers; nil: no per-cluster bound.
	Limiter *fairness.Limiter
	// MaxBodyBytes is how much of an ordinary request's body is read
	// before the request takes a cluster slot (the generic server's
	// MaxRequestBodyBytes); 0: none, the body streams with the slot taken.
	MaxBodyBytes int64
	// Tracer makes the spans of the fairness wait, the pool lease, an
	// upgrade's setup and the probe, and gives the hub's server span the
	// cluster, verb and resource; nil (no --tracing-config-file): none.
	// The pool's Options.Tracer makes the round trips' client spans.
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
	opts    Options
	health  Health // nil without a prober
	metrics *Metrics
	streams *streams
	reverse *httputil.ReverseProxy // every ordinary request's, see forward.go
	watches *httputil.ReverseProxy // every watch's: the same, with smaller copy buffers
}

// New returns the proxy. Clusters, Pool and Authorizer are required.
func New(opts Options) (*Proxy, error) {
	switch {
	case opts.Clusters == nil, opts.Pool == nil:
		return nil, fmt.Errorf("proxy: Options.Clusters and Options.Pool are required")
	case opts.Authorizer == nil:
		return nil, fmt.Errorf("proxy: Options.Authorizer is required (exec, attach and port-forward are authorized as create)")
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

// exchange is what serving one request needs, in one allocation.
type exchange struct {
	rec   statusRecorder
	inner innerParse // unless the handler chain's memo has it
	lease pool.Lease
	fwd   forwarded
}

// Serve serves one proxied request for the named gateway, as the route
// does. subpath is the path on the managed cluster; the query is taken from
// the request as sent.
func (p *Proxy) Serve(w http.ResponseWriter, req *http.Request, name, subpath string) {
	x := new(exchange)
	// The inner request is parsed once and serves the metrics label, the
	// subpath authorization and the watch handling.
	inner := subpath
	if !strings.HasPrefix(inner, "/") {
		inner = "/" + inner
	}
	parsed := parseInnerOnce(req, nil, inner, &x.inner)
	in, inErr, kind := parsed.in, parsed.err, parsed.kind
	auditInner(req.Context(), name, subpath, in)
	upgrade := httpstream.IsUpgradeRequest(req)
	w, rec := p.metrics.instrumentInto(&x.rec, w, req, kind)
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
	gw, err := p.opts.Clusters.GetForRequest(req.Context(), name)
	if err != nil {
		writeStatus(w, req, err)
		return
	}
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
	id, err := p.identityFor(gw, u)
	if err != nil {
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
	release, err := p.opts.Limiter.Acquire(req.Context(), name, u.GetName(), limitKind(kind))
	tracing.End(span, err, "refused or abandoned")
	if err != nil {
		if req.Context().Err() == nil { // else nobody is listening
			writeStatus(w, req, err)
		}
		return
	}
	defer release()
	lease := &x.lease
	_, span = p.opts.Tracer.Start(req.Context(), "cluster-gateway.pool.lease", trace.SpanKindInternal, attrs...)
	// Through the cluster's record: a gateway deleted on the request's way
	// is NotFound, and one changed on its way goes as it is now.
	leased, err := p.opts.Clusters.Lease(lease, gw)
	if err == nil && p.opts.Tracer != nil { // a variadic call on an interface allocates, even on a no-op span
		span.SetAttributes(attribute.Bool("cluster_gateway.pool.created", lease.Created()))
	}
	tracing.End(span, err, "no transport")
	var status apierrors.APIStatus
	switch {
	case errors.Is(err, endpointpolicy.ErrDenied):
		writeStatus(w, req, endpointDenied(name, err))
		return
	case errors.As(err, &status):
		writeStatus(w, req, err)
		return
	case err != nil:
		writeStatus(w, req, statusError(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
			fmt.Sprintf("ClusterGateway %q cannot be used: %v", name, err)))
		return
	}
	defer lease.Release()
	if leased != gw {
		gw = leased
		if id, err = p.identityFor(gw, u); err != nil {
			writeStatus(w, req, err)
			return
		}
	}

	f := &x.fwd
	*f = forwarded{Context: req.Context(), location: *gw.Address, watch: isWatch(in), streams: p.streams, responder: responder{cluster: name, health: p.health}}
	location := &f.location
	location.Path = joinPath(gw.Address.Path, subpath)
	location.RawPath = ""
	location.RawQuery = req.URL.RawQuery
	auditIdentity(req.Context(), gw, u)
	f.up = upstreamTransport{base: lease.Transport(), id: id, cluster: name}
	if gw.Object.Spec.Credential.Type == v1alpha1.CredentialProvider {
		f.up.provided, f.up.clusters = gw, p.opts.Clusters
	}

	if !upgrade {
		rp := p.reverse
		if f.watch {
			rp = p.watches
		}
		rp.ServeHTTP(w, req.WithContext(f))
		return
	}

	// Upgrades (exec, attach, port-forward) go through UpgradeAwareHandler,
	// which logs the headers of the request it gets (from -v=6): the
	// client's credentials and claimed identities go now, so that it never
	// sees them. The upgrade round tripper (upstreamUpgrade) replaces them
	// with the gateway's identity, as upstreamTransport does, on the request
	// written to the cluster.
	// An upgrade keeps the one connection it dials: its address is picked
	// now, and its TLS is verified against that address's name.
	lease.PickAddress(location)
	out := req.WithContext(req.Context())
	out.Header = utilnet.CloneHeader(req.Header)
	out.URL = location
	out.Host = location.Host
	scrubClientHeaders(out.Header)
	// The handler re-parses its location, and a query it cannot parse (one
	// with a '#') would leave it nil: the query goes with the request
	// (UseRequestLocation), not in the location.
	base := *location
	base.RawQuery = ""
	h := utilproxy.NewUpgradeAwareHandler(&base, &f.up, false, false, f.responder)
	h.UseRequestLocation = true
	h.UseLocationHost = true
	// Upgrades need HTTP/1.1.
	up := &upstreamUpgrade{base: lease.UpgradeTransport(), id: id, tracer: p.opts.Tracer}
	h.UpgradeTransport = up
	var stop func()
	w, out, up.setup, stop = upgradeWatchdog(w, out, p.upgradeSetupTimeout())
	if tr := p.opts.Tracer; tr != nil {
		// The client span of the upgrade's request, up to the upgrade
		// (or its refusal): the stream after it is not traced.
		var ctx context.Context
		ctx, up.setup.span = tr.Start(out.Context(), "cluster-gateway.upgrade", trace.SpanKindClient, attrs...)
		out = out.WithContext(ctx)
	}
	defer stop()
	p.streams.upgradeStarted()
	defer p.streams.upgradeEnded()
	h.ServeHTTP(w, out)
}

// identityFor is who the managed cluster is told the request comes from:
// the token, stored or from its source (X.509 credentials are in the pooled
// TLS config), and in Caller mode the hub caller, unless headers cannot carry
// the caller exactly.
func (p *Proxy) identityFor(gw *gateways.Gateway, caller user.Info) (identity, error) {
	spec := gw.Object.Spec
	id := identity{token: gw.Conn.Token}
	if spec.Impersonation.Mode == v1alpha1.ImpersonationCaller && caller != nil {
		if what := impersonationProblem(caller); what != "" {
			return identity{}, statusError(http.StatusForbidden, metav1.StatusReasonForbidden, fmt.Sprintf(
				"ClusterGateway %q impersonates its caller (spec.impersonation.mode Caller), but the %s of hub user %q holds a control character or white space at either end, which HTTP headers cannot carry unchanged: use a ClusterGateway whose impersonation mode is None, or an identity without them",
				gw.Name(), what, caller.GetName()))
		}
		id.caller = caller
	}
	return id, nil
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
