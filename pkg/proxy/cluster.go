package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	utilproxy "k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/clusters"
	"github.com/clustergateway/cluster-gateway/pkg/endpointpolicy"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
	"github.com/clustergateway/cluster-gateway/pkg/pool"
	"github.com/clustergateway/cluster-gateway/pkg/tracing"
)

// The cluster side of a proxied request: what Serve hands over once the
// hub side (parse, authorize, audit, fair share) is done. As in
// kube-aggregator's handler_proxy.go, the request walks one way from here:
// lease, identity, transport, then the reverse proxy or the upgrade.

// clusterCall is what the hub side hands the cluster side.
type clusterCall struct {
	cluster clusters.Handle // the cluster's record, with the gateway as the request read it
	caller  user.Info
	subpath string
	watch   bool
	upgrade bool
	attrs   []attribute.KeyValue // the spans' attributes; nil without a tracer
}

// toCluster answers req on the cluster of c.cluster. It leases the
// cluster's pooled transport through the record the hub side took (a
// gateway deleted on the request's way is NotFound, one changed or created
// again on its way goes as it is now), sets the identity the cluster sees,
// and sends req through the shared reverse proxy, or upgrades it (exec,
// attach, port-forward).
func (p *Proxy) toCluster(w http.ResponseWriter, req *http.Request, c clusterCall) {
	name := c.cluster.Gateway().Name()
	_, span := p.opts.Tracer.Start(req.Context(), "cluster-gateway.pool.lease", trace.SpanKindInternal, c.attrs...)
	lease, gw, err := c.cluster.Lease()
	if err == nil && p.opts.Tracer != nil { // a variadic call on an interface allocates, even on a no-op span
		span.SetAttributes(attribute.Bool("cluster_gateway.pool.created", lease.Created()))
	}
	tracing.End(span, err, "no transport")
	if err != nil {
		writeLeaseError(w, req, name, err)
		return
	}
	defer lease.Release()
	id, err := p.identityFor(gw, c.caller)
	if err != nil {
		writeStatus(w, req, err)
		return
	}
	location := *gw.Address
	location.Path = joinPath(gw.Address.Path, c.subpath)
	location.RawPath = ""
	location.RawQuery = req.URL.RawQuery
	auditIdentity(req.Context(), gw, c.caller)
	up := upstreamTransport{base: lease.Transport(), id: id, cluster: name}
	if gw.Object.Spec.Credential.Type == v1alpha1.CredentialProvider {
		up.provided, up.clusters = gw, p.opts.Clusters
	}
	res := responder{cluster: name, health: p.health}
	if !c.upgrade {
		f := &forwarded{location: location, up: up, watch: c.watch, streams: p.streams, responder: res}
		rp := p.reverse
		if c.watch {
			rp = p.watches
		}
		rp.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), forwardedKey{}, f)))
		return
	}
	// Copies, so that only an upgrade moves them to the heap.
	upLocation, upTransport := location, up
	p.upgrade(w, req, lease, &upLocation, &upTransport, id, res, c.attrs)
}

// writeLeaseError answers a request whose cluster could not be leased: the
// endpoint policy's refusal, the Status the lease failed with (NotFound,
// for one), else 503 naming the cluster.
func writeLeaseError(w http.ResponseWriter, req *http.Request, name string, err error) {
	var status apierrors.APIStatus
	switch {
	case errors.Is(err, endpointpolicy.ErrDenied):
		writeStatus(w, req, endpointDenied(name, err))
	case errors.As(err, &status):
		writeStatus(w, req, err)
	default:
		writeStatus(w, req, statusError(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
			fmt.Sprintf("ClusterGateway %q cannot be used: %v", name, err)))
	}
}

// upgrade serves an upgrade (exec, attach, port-forward) through
// UpgradeAwareHandler over the lease's HTTP/1.1 transport. The handler logs
// the headers of the request it gets (from -v=6): the client's credentials
// and claimed identities go before it sees them, and the upgrade round
// tripper (upstreamUpgrade) sets the gateway's identity on the request
// written to the cluster, as upstreamTransport does. An upgrade keeps the
// one connection it dials: its address is picked now, and its TLS is
// verified against that address's name.
func (p *Proxy) upgrade(w http.ResponseWriter, req *http.Request, lease *pool.Lease, location *url.URL, up *upstreamTransport, id identity, res responder, attrs []attribute.KeyValue) {
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
	h := utilproxy.NewUpgradeAwareHandler(&base, up, false, false, res)
	h.UseRequestLocation = true
	h.UseLocationHost = true
	// Upgrades need HTTP/1.1.
	uu := &upstreamUpgrade{base: lease.UpgradeTransport(), id: id, tracer: p.opts.Tracer}
	h.UpgradeTransport = uu
	var stop func()
	w, out, uu.setup, stop = upgradeWatchdog(w, out, p.upgradeSetupTimeout())
	if tr := p.opts.Tracer; tr != nil {
		// The client span of the upgrade's request, up to the upgrade
		// (or its refusal): the stream after it is not traced.
		var ctx context.Context
		ctx, uu.setup.span = tr.Start(out.Context(), "cluster-gateway.upgrade", trace.SpanKindClient, attrs...)
		out = out.WithContext(ctx)
	}
	defer stop()
	p.streams.upgradeStarted()
	defer p.streams.upgradeEnded()
	h.ServeHTTP(w, out)
}

// identityFor returns who the managed cluster is told the request comes
// from: the token, stored or from its source (X.509 credentials are in the
// pooled TLS config), and in Caller mode the hub caller. It refuses a caller
// that headers cannot carry exactly (callerProblem).
func (p *Proxy) identityFor(gw *gateways.Gateway, caller user.Info) (identity, error) {
	id := identity{token: gw.Conn.Token}
	if gw.Object.Spec.Impersonation.Mode == v1alpha1.ImpersonationCaller && caller != nil {
		if err := callerProblem(gw, caller); err != nil {
			return identity{}, err
		}
		id.caller = caller
	}
	return id, nil
}

// callerProblem returns a Forbidden error when gw impersonates its caller
// (Caller mode) and HTTP headers cannot carry caller's identity unchanged;
// else nil.
func callerProblem(gw *gateways.Gateway, caller user.Info) error {
	if gw.Object.Spec.Impersonation.Mode != v1alpha1.ImpersonationCaller || caller == nil {
		return nil
	}
	if what := impersonationProblem(caller); what != "" {
		return statusError(http.StatusForbidden, metav1.StatusReasonForbidden, fmt.Sprintf(
			"ClusterGateway %q impersonates its caller (spec.impersonation.mode Caller), but the %s of hub user %q holds a control character or white space at either end, which HTTP headers cannot carry unchanged: use a ClusterGateway whose impersonation mode is None, or an identity without them",
			gw.Name(), what, caller.GetName()))
	}
	return nil
}
