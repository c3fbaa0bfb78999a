package proxy

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/endpointpolicy"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
	"github.com/clustergateway/cluster-gateway/pkg/health"
	"github.com/clustergateway/cluster-gateway/pkg/pool"
	"github.com/clustergateway/cluster-gateway/pkg/tracing"
	"github.com/clustergateway/cluster-gateway/pkg/version"
)

// probeTimeout bounds the health subresource's probe.
const probeTimeout = 5 * time.Second

// proberUserAgent names the background prober's requests in managed
// clusters' audit logs (and lets tests tell them from users' traffic). The
// health subresource's probe is a user's request and keeps the Go default.
var proberUserAgent = "cluster-gateway-prober/" + version.String()

// Probe asks the named cluster's /readyz through the pooled transport, with the
// gateway's credential (impersonating the caller in Caller mode): the same
// path a proxied request takes. It serves the health subresource.
func (p *Proxy) Probe(ctx context.Context, name string) (*v1alpha1.ClusterGatewayHealth, error) {
	gw, err := p.opts.Clusters.Get(name)
	if err != nil {
		return nil, err
	}
	h := &v1alpha1.ClusterGatewayHealth{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: gw.Object.UID, ResourceVersion: gw.Object.ResourceVersion, CreationTimestamp: gw.Object.CreationTimestamp},
		ProbeTime:  metav1.Now(),
	}
	var caller user.Info
	if gw.Object.Spec.Impersonation.Mode == v1alpha1.ImpersonationCaller {
		u, ok := apirequest.UserFrom(ctx)
		if !ok {
			return nil, fmt.Errorf("no hub user on the request to impersonate")
		}
		caller = u
	}
	id, err := p.identityFor(gw, caller)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	target, terr := p.opts.Clusters.Target(gw)
	rss := p.getEach(ctx, gw, target, terr, id, "", "/readyz")
	r := rss[firstReachable(rss)][0]
	h.Code = int32(r.code)
	h.Healthy = r.reason == v1alpha1.ReasonReachable
	if !h.Healthy {
		h.Message = r.message
	}
	if len(rss) > 1 {
		// What the prober's probe finds at each address (the same
		// outcomes), as the API shows them. Not told to the pool: in
		// Caller mode the answer is the caller's, not the address's.
		for _, a := range addressOutcomes(gw, rss) {
			ah := v1alpha1.AddressHealth{Address: a.Address, Reachable: a.Reason == v1alpha1.ReasonReachable, Reason: a.Reason, Code: int32(a.Code)}
			if !ah.Reachable {
				ah.Message = a.Message
			}
			if a.Latency > 0 {
				ah.Latency = &metav1.Duration{Duration: a.Latency.Round(100 * time.Microsecond)}
			}
			h.Addresses = append(h.Addresses, ah)
		}
	}
	return h, nil
}

// ProbeCluster is the prober's probe: /readyz through the pooled transport
// with the stored credential itself (no caller to impersonate: it only reads
// /readyz and /version), and on success the cluster's version. It takes
// the cluster's record once (Take), as a proxied request does, for the
// gateway and its pool key at every address.
func (p *Proxy) ProbeCluster(ctx context.Context, name string) health.Outcome {
	h, err := p.opts.Clusters.Take(ctx, name)
	if err != nil {
		return health.Outcome{Reason: v1alpha1.ReasonGatewayNotReady, Message: err.Error()}
	}
	gw := h.Gateway()
	id, _ := p.identityFor(gw, nil) // no caller, no error
	ctx, span := p.opts.Tracer.Start(ctx, "cluster-gateway.probe", trace.SpanKindInternal, tracing.Cluster.String(name))
	defer span.End()
	target, terr := h.Target()
	rss := p.getEach(ctx, gw, target, terr, id, proberUserAgent, "/readyz", "/version")
	rs := rss[firstReachable(rss)]
	r := rs[0]
	out := health.Outcome{Reason: r.reason, Message: r.message, Latency: r.latency}
	span.SetAttributes(tracing.Outcome.String(r.reason))
	if len(rss) > 1 {
		out.Addresses = addressOutcomes(gw, rss)
		if terr == nil {
			p.reportAddresses(target, gw, rss)
		}
	}
	if len(rs) == 2 {
		if v := rs[1]; v.reason == v1alpha1.ReasonReachable {
			var info struct {
				GitVersion string `json:"gitVersion"`
			}
			if json.Unmarshal(v.body, &info) == nil {
				out.ServerVersion = info.GitVersion
			}
		}
	}
	return out
}

// firstReachable is the index of the first address whose probe answered,
// else 0 (the primary address, whose failure then speaks for the cluster).
func firstReachable(rss [][]probeResult) int {
	for i, rs := range rss {
		if rs[0].reason == v1alpha1.ReasonReachable {
			return i
		}
	}
	return 0
}

// addressOutcomes are what getEach found at each of gw's addresses
// (address first), as the status and the health subresource show them.
func addressOutcomes(gw *gateways.Gateway, rss [][]probeResult) []health.AddressOutcome {
	names := append([]string{gw.Conn.Endpoint.Address}, gw.Conn.Endpoint.AdditionalAddresses...)
	out := make([]health.AddressOutcome, len(rss))
	for i, rs := range rss {
		r := rs[0]
		out[i] = health.AddressOutcome{Address: names[i], Reason: r.reason, Message: r.message, Code: r.code, Latency: r.latency}
	}
	return out
}

// reportAddresses tells the pool what the prober's probe found at each of
// gw's addresses, at target, gw's pool key: its spreading leaves out the
// addresses that did not answer.
func (p *Proxy) reportAddresses(target *pool.Target, gw *gateways.Gateway, rss [][]probeResult) {
	urls := append([]*url.URL{gw.Address}, gw.AdditionalAddresses...)
	for i, rs := range rss {
		p.opts.Pool.ReportAddress(target, urls[i], rs[0].reason == v1alpha1.ReasonReachable)
	}
}

// getEach is get at each of gw's addresses at once, address first: a
// blackholed address costs the probe its timeout, not the others theirs.
// target is gw's pool key (Target), terr why it has none.
func (p *Proxy) getEach(ctx context.Context, gw *gateways.Gateway, target *pool.Target, terr error, id identity, userAgent string, paths ...string) [][]probeResult {
	if !gw.Ready || len(gw.AdditionalAddresses) == 0 {
		return [][]probeResult{p.get(ctx, gw, target, terr, gw.Address, id, userAgent, paths...)}
	}
	urls := append([]*url.URL{gw.Address}, gw.AdditionalAddresses...)
	rss := make([][]probeResult, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Go(func() { rss[i] = p.get(ctx, gw, target, terr, u, id, userAgent, paths...) })
	}
	wg.Wait()
	return rss
}

// probeResult is one GET through the gateway's transport, classified.
type probeResult struct {
	reason, message string
	code            int
	body            []byte
	latency         time.Duration
}

// get sends GET (as userAgent, if set) for each path in turn to gw's cluster at
// addr (one of its addresses) the way a proxied request goes (the same transport, identity and endpoint policy), over one
// connection, and says whether each answered 200 and, if not, why. It stops
// at the first that did not: the result has at least one element. target
// is gw's pool key (Target), terr why it has none.
func (p *Proxy) get(ctx context.Context, gw *gateways.Gateway, target *pool.Target, terr error, addr *url.URL, id identity, userAgent string, paths ...string) []probeResult {
	name := gw.Name()
	if !gw.Ready {
		return []probeResult{{reason: v1alpha1.ReasonGatewayNotReady, message: gw.Problem}}
	}
	if terr != nil {
		return []probeResult{{reason: v1alpha1.ReasonDialFailed, message: terr.Error()}}
	}
	var rs []probeResult
	// Pool.Probe: a probe neither evicts, keeps alive nor counts as the
	// entries users' requests work with.
	err := p.opts.Pool.Probe(target, func(base http.RoundTripper) error {
		rt := &upstreamTransport{base: base, id: id, cluster: name}
		for _, path := range paths {
			u := *addr
			u.Path = joinPath(addr.Path, path)
			r := p.send(ctx, rt, u.String(), path, userAgent)
			rs = append(rs, r)
			if r.reason != v1alpha1.ReasonReachable {
				break
			}
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, endpointpolicy.ErrDenied) {
			return []probeResult{{reason: v1alpha1.ReasonDialFailed, message: endpointDenied(name, err).ErrStatus.Message}}
		}
		return []probeResult{{reason: v1alpha1.ReasonDialFailed, message: err.Error()}}
	}
	return rs
}

// send is get's request, through rt.
func (p *Proxy) send(ctx context.Context, rt *upstreamTransport, url, path, userAgent string) probeResult {
	var connected atomic.Bool
	trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { connected.Store(true) }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet, url, nil)
	if err != nil {
		return probeResult{reason: v1alpha1.ReasonDialFailed, message: err.Error()}
	}
	if userAgent != "" {
		req.Header.Set("User-Agent", userAgent)
	}
	start := time.Now()
	resp, err := rt.RoundTrip(req)
	if err != nil {
		r := probeResult{reason: classify(err, connected.Load()), message: upstreamError(rt.cluster, err, false).ErrStatus.Message}
		if r.reason == v1alpha1.ReasonNoAnswer && connected.Load() {
			// Not "no connection": there was one, and no answer on it.
			r.message = fmt.Sprintf("cluster %q did not answer %s on an open connection in time (%v)", rt.cluster, path, err)
		}
		return r
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	r := probeResult{code: resp.StatusCode, body: body, latency: time.Since(start)}
	if resp.StatusCode != http.StatusOK {
		r.reason = v1alpha1.ReasonHTTPError
		r.message = fmt.Sprintf("%s answered %d: %s", path, resp.StatusCode, strings.TrimSpace(string(body)))
		return r
	}
	r.reason, r.message = v1alpha1.ReasonReachable, fmt.Sprintf("%s answered 200", path)
	return r
}

// classify tells a dial failure, a TLS failure and a cluster that accepted
// the connection but did not answer apart.
func classify(err error, connected bool) string {
	var (
		recordErr tls.RecordHeaderError
		alertErr  tls.AlertError
		netErr    net.Error
	)
	switch {
	case untrustedCertificate(err), errors.As(err, &recordErr), errors.As(err, &alertErr), strings.Contains(err.Error(), "tls: "):
		return v1alpha1.ReasonTLSFailed
	case strings.Contains(err.Error(), "timeout awaiting response headers"):
		return v1alpha1.ReasonNoAnswer
	case connected && (errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout())):
		return v1alpha1.ReasonNoAnswer
	}
	return v1alpha1.ReasonDialFailed
}
