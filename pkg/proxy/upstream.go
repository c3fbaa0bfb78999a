package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	utilproxy "k8s.io/apimachinery/pkg/util/proxy"

	"github.com/clustergateway/cluster-gateway/pkg/clusters"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
	"github.com/clustergateway/cluster-gateway/pkg/tracing"
)

// upstreamTransport is the last step before the wire for ordinary requests,
// and the one place where their headers lose what the client sent of
// credentials and identities and get the gateway's instead
// (identity.replace). httputil.ReverseProxy has already removed the headers
// the client named in Connection, so the identity set here is exactly what
// the cluster gets: a client cannot strip it (kube-aggregator's auth-proxy
// round tripper does the same). It also refuses to pass a redirect on.
type upstreamTransport struct {
	base    http.RoundTripper
	id      identity
	cluster string
	// provided is the gateway when its credential (token or client
	// certificate) comes from a credential provider, which a 401 asks for
	// a new one (in the background: the answer goes to the client as it is).
	provided *gateways.Gateway
	clusters *clusters.Owner
}

func (t *upstreamTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.roundTripOwned(ownHeaders(req))
}

// roundTripOwned is RoundTrip for a request made for this round trip alone
// (the reverse proxy's copy of the client's): the identity replaces the
// client's in place rather than on a copy.
func (t *upstreamTransport) roundTripOwned(req *http.Request) (*http.Response, error) {
	t.id.replace(req.Header)
	resp, err := t.base.RoundTrip(req)
	return t.checked(req, resp, err)
}

func (t *upstreamTransport) checked(req *http.Request, resp *http.Response, err error) (*http.Response, error) {
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusUnauthorized && t.provided != nil && (t.id.token != "" || len(t.provided.Conn.Cert) > 0) {
		go t.clusters.Unauthorized(context.Background(), t.provided, t.id.token)
	}
	if where, ok := redirectLocation(resp); ok {
		return redirectRefused(t.cluster, req, resp, where), nil
	}
	return resp, nil
}

// upstreamUpgrade does the same for exec, attach and port-forward:
// UpgradeAwareHandler writes the request that WrapRequest returns straight
// onto the connection it dials with the wrapped HTTP/1.1 transport. The
// identity goes on a copy, never on the request the handler logs.
type upstreamUpgrade struct {
	base  *http.Transport
	id    identity
	setup *upgradeSetup // bounds the backend connection until set up
	// tracer sends the upgrade's span context (in the request's context)
	// in traceparent; nil: none.
	tracer *tracing.Tracer
}

var (
	_ utilproxy.UpgradeRequestRoundTripper = &upstreamUpgrade{}
	_ utilnet.RoundTripperWrapper          = &upstreamUpgrade{}
)

func (u *upstreamUpgrade) RoundTrip(req *http.Request) (*http.Response, error) {
	out := ownHeaders(req)
	u.id.replace(out.Header)
	return u.base.RoundTrip(out)
}

func (u *upstreamUpgrade) WrapRequest(req *http.Request) (*http.Request, error) {
	out := ownHeaders(req)
	u.id.replace(out.Header)
	upgradeConnectionHeader(out.Header)
	u.tracer.Inject(req.Context(), out.Header)
	return out, nil
}

// WrappedRoundTripper lets UpgradeAwareHandler's dialer find the pooled
// transport's DialContext and TLS config.
func (u *upstreamUpgrade) WrappedRoundTripper() http.RoundTripper {
	if u.setup == nil {
		return u.base
	}
	t := u.base.Clone()
	dial := u.base.DialContext
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return u.setup.guard(c), nil
	}
	return t
}

// ownHeaders returns a shallow copy of req with a header map of its own,
// for identity.replace to change: the caller's request (which
// UpgradeAwareHandler logs) keeps its own.
func ownHeaders(req *http.Request) *http.Request {
	out := new(http.Request)
	*out = *req
	out.Header = make(http.Header, len(req.Header)+3)
	for k, v := range req.Header {
		out.Header[k] = v
	}
	return out
}

// redirectLocation tells whether resp is a redirect a client could follow:
// a 3xx with any Location at all, not only a first non-empty one (curl -L
// follows the second of an empty and a real one); where is the first
// non-empty one, for the message. A 3xx without Location (304 Not Modified
// to a conditional GET of the OpenAPI) passes.
func redirectLocation(resp *http.Response) (where string, ok bool) {
	if resp.StatusCode < 300 || resp.StatusCode > 399 {
		return "", false
	}
	locations := resp.Header.Values("Location")
	for _, l := range locations {
		if l = strings.TrimSpace(l); l != "" {
			return l, true
		}
	}
	return "", len(locations) > 0
}

// redirectRefused replaces a cluster's redirect with a 502 Status, as the
// hub's aggregator does (--aggregator-reject-forwarding-redirect): a client
// following it would take its request, and its credentials, elsewhere.
func redirectRefused(cluster string, req *http.Request, resp *http.Response, location string) *http.Response {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	st := statusError(http.StatusBadGateway, metav1.StatusReasonInternalError, fmt.Sprintf(
		"cluster %q answered with a redirect (%d to %s), which the gateway does not pass on: check spec.endpoint.address of ClusterGateway %q (it must be the API server itself, not a login page or load balancer that redirects)",
		cluster, resp.StatusCode, redirectTarget(location), cluster)).ErrStatus
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	body, _ := json.Marshal(st)
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", http.StatusBadGateway, http.StatusText(http.StatusBadGateway)),
		StatusCode:    http.StatusBadGateway,
		Proto:         resp.Proto,
		ProtoMajor:    resp.ProtoMajor,
		ProtoMinor:    resp.ProtoMinor,
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(strings.NewReader(string(body))),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

// redirectTarget names where a redirect pointed without its query or user
// info, which may carry someone's codes or credentials.
func redirectTarget(location string) string {
	if location == "" {
		return "an empty location"
	}
	u, err := url.Parse(location)
	if err != nil {
		return "an unparsable location"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}
