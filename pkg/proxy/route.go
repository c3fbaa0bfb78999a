package proxy

import (
	"net/http"
	"strings"
	"sync/atomic"

	"k8s.io/apiserver/pkg/endpoints/metrics"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// Route serves the proxy subresource straight from the handler chain,
// innermost (after authentication, authorization, impersonation, audit and
// the in-flight limit), instead of through the generic server's REST
// handler: go-restful's routing and the connect handler's decoding of its
// options cost a proxied request more than the proxy's own work. It does
// what they did, in the same terms: the same methods (the REST's, given to
// Serve), the same name and
// subpath (the connect handler's rule, trailing slash kept), the same
// apiserver_request_* and apiserver_longrunning_requests metrics; and, as
// the connect handler is not in the way, dryRun reaches the cluster as sent.
// Every other request, and one Route cannot place exactly, goes to next.
type Route struct {
	serving atomic.Pointer[routeTo]
	sets    atomic.Pointer[setsTo]
}

// SetServer serves the proxy subresource of clustersets (pkg/fanout): the
// set's name and the subpath, as for one cluster.
type SetServer interface {
	Serve(w http.ResponseWriter, req *http.Request, set, subpath string)
}

type setsTo struct{ s SetServer }

// ServeSets makes the route serve the proxy subresource of clustersets with
// s; until then it goes to next (which does not serve it: 404).
func (rt *Route) ServeSets(s SetServer) { rt.sets.Store(&setsTo{s}) }

// IsSetProxy tells whether the hub-side request is for the proxy
// subresource of a set of clusters (clustersets/<selection>/proxy/...).
func IsSetProxy(ri *apirequest.RequestInfo) bool {
	return ri != nil && ri.IsResourceRequest && ri.APIGroup == v1alpha1.GroupName && ri.Resource == "clustersets" &&
		ri.Subresource == "proxy" && len(ri.Parts) >= 3 && ri.APIVersion == v1alpha1.SchemeGroupVersion.Version &&
		ri.Namespace == "" && ri.Name != "" && ri.Parts[1] == ri.Name
}

// routeTo is what a Route serves with.
type routeTo struct {
	proxy   *Proxy
	methods map[string]bool
}

// Serve makes the route serve with p the methods the proxy subresource is
// installed for (pkg/registry/clustergateway's ProxyREST.ConnectMethods,
// which the REST handler serves). Until then, everything goes to next: the
// server does not serve before the proxy is built.
func (rt *Route) Serve(p *Proxy, methods []string) {
	to := &routeTo{proxy: p, methods: make(map[string]bool, len(methods))}
	for _, m := range methods {
		to.methods[m] = true
	}
	rt.serving.Store(to)
}

// Handler is the route in front of next.
func (rt *Route) Handler(next http.Handler) http.Handler {
	monitored := metrics.InstrumentHandlerFunc("CONNECT", v1alpha1.GroupName, v1alpha1.SchemeGroupVersion.Version, "clustergateways", "proxy",
		"resource", metrics.APIServerComponent, false, "", func(w http.ResponseWriter, req *http.Request) {
			ri, _ := apirequest.RequestInfoFrom(req.Context())
			metrics.RecordLongRunning(req, ri, metrics.APIServerComponent, func() {
				rt.serving.Load().proxy.Serve(w, req, ri.Name, connectSubpath(ri))
			})
		})
	sets := metrics.InstrumentHandlerFunc("CONNECT", v1alpha1.GroupName, v1alpha1.SchemeGroupVersion.Version, "clustersets", "proxy",
		"resource", metrics.APIServerComponent, false, "", func(w http.ResponseWriter, req *http.Request) {
			ri, _ := apirequest.RequestInfoFrom(req.Context())
			metrics.RecordLongRunning(req, ri, metrics.APIServerComponent, func() {
				rt.sets.Load().s.Serve(w, req, ri.Name, connectSubpath(ri))
			})
		})
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ri, ok := apirequest.RequestInfoFrom(req.Context())
		if ok && rt.sets.Load() != nil && IsSetProxy(ri) {
			sets(w, req)
			return
		}
		to := rt.serving.Load()
		if !ok || to == nil || !to.routed(req, ri) {
			next.ServeHTTP(w, req)
			return
		}
		monitored(w, req)
	})
}

// routed tells whether the REST handler would have served req as the
// proxy subresource of a named ClusterGateway of this version.
func (to *routeTo) routed(req *http.Request, ri *apirequest.RequestInfo) bool {
	return isProxy(ri) && to.methods[req.Method] && ri.APIVersion == v1alpha1.SchemeGroupVersion.Version &&
		ri.Namespace == "" && ri.Name != "" && ri.Parts[1] == ri.Name
}

// connectSubpath is the subpath the generic server's connect handler gives
// a connecter (k8s.io/apiserver handlers.getRequestOptions): the parts after
// .../NAME/proxy joined with slashes, with a leading slash, and a trailing
// one if the request had one. It is that string cut out of the request's
// path, which holds it, rather than joined anew: every proxied request asks.
func connectSubpath(ri *apirequest.RequestInfo) string {
	path := ri.Path
	end := len(strings.TrimRight(path, "/")) // Parts come from the path trimmed of slashes
	trailing := end < len(path)
	n := len(ri.Parts) - 3 // parts after NAME/proxy
	if n <= 0 {
		if trailing {
			return "/"
		}
		return ""
	}
	// The last n parts of path[:end] start at start.
	start := end
	for range n {
		i := strings.LastIndexByte(path[:start], '/')
		if i < 0 {
			return joinedSubpath(ri) // not a path Parts were split from
		}
		start = i
	}
	// path[start] is the slash before the first of them; an empty first
	// part (".../proxy//x") brings its own leading slash, as joining does.
	if start+1 < end && path[start+1] == '/' {
		start++
	}
	if trailing {
		end++ // path[end] is a slash
	}
	return path[start:end]
}

// joinedSubpath is connectSubpath by its definition, for a RequestInfo whose
// Parts did not come from its Path.
func joinedSubpath(ri *apirequest.RequestInfo) string {
	p := strings.Join(ri.Parts[3:], "/")
	if len(p) > 0 && !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	if strings.HasSuffix(ri.Path, "/") && !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return p
}
