package fanout

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/warning"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
)

// ClusterAnnotation marks each item (and each Table row's object) with the
// ClusterGateway it was read through.
const ClusterAnnotation = v1alpha1.GroupName + "/cluster"

// AuditClusters annotates the set request's audit event with the clusters
// it read (comma-separated, at most MaxAuditClusters, then "+N more").
const AuditClusters = "fanout." + v1alpha1.GroupName + "/clusters"

// Resource is the hub resource whose proxy subresource a set is read through.
const Resource = "clustersets"

// DefaultPageSize is the page the gateway reads each cluster's list in when
// the client asks no limit: what it holds of one cluster at a time.
const DefaultPageSize = 500

// ServeFunc serves one proxied request for one cluster: proxy.Proxy.Serve.
type ServeFunc func(w http.ResponseWriter, req *http.Request, cluster, subpath string)

// Gateways is where the set's clusters are looked up (StoreGateways).
type Gateways interface {
	// Names are the ClusterGateways whose labels match.
	Names(selector labels.Selector) ([]string, error)
	Exists(name string) bool
}

// StoreGateways are the gateway store's ClusterGateways.
func StoreGateways(s *gateways.Store) Gateways { return storeGateways{s} }

type storeGateways struct{ s *gateways.Store }

func (g storeGateways) Names(selector labels.Selector) ([]string, error) {
	gws, _, err := g.s.List(selector)
	names := make([]string, 0, len(gws))
	for _, gw := range gws {
		names = append(names, gw.Name())
	}
	return names, err
}

func (g storeGateways) Exists(name string) bool {
	_, err := g.s.Get(name)
	return err == nil
}

// Params are what New takes: the fan-out's Config and what it works with.
type Params struct {
	Gateways   Gateways
	Authorizer authorizer.Authorizer
	Serve      ServeFunc
	Config
}

// Config is what the flags set (--fanout-*).
type Config struct {
	// MaxClusters is how many clusters a list reads at once; 0: all.
	MaxClusters int
	// ClusterTimeout bounds each cluster's page of a list, and the time a
	// watch waits for each cluster's answer to begin; a cluster that takes
	// longer becomes a warning. 0: only the request's own deadline.
	ClusterTimeout time.Duration
	// FirstRowWait bounds how long a list's answer waits, once the first
	// cluster's page has come, for the other clusters' first pages (it
	// waits a tenth of the time that page took, at most this); 0: the
	// answer begins with the first page.
	FirstRowWait time.Duration
	// PageSize is how many items a list without a limit reads of each
	// cluster at a time: the gateway holds at most about a page per cluster.
	PageSize int
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{MaxClusters: 16, ClusterTimeout: 20 * time.Second, FirstRowWait: time.Second, PageSize: DefaultPageSize}
}

// Validate checks c.
func (c Config) Validate() []error {
	var errs []error
	if c.MaxClusters < 0 {
		errs = append(errs, fmt.Errorf("--fanout-max-clusters must not be negative, not %d", c.MaxClusters))
	}
	if c.ClusterTimeout < 0 {
		errs = append(errs, fmt.Errorf("--fanout-cluster-timeout must not be negative, not %v", c.ClusterTimeout))
	}
	if c.FirstRowWait < 0 {
		errs = append(errs, fmt.Errorf("--fanout-first-row-wait must not be negative, not %v", c.FirstRowWait))
	}
	if c.PageSize < 1 {
		errs = append(errs, fmt.Errorf("--fanout-page-size must be at least 1, not %d", c.PageSize))
	}
	return errs
}

// FanOut serves the proxy subresource of clustersets.
type FanOut struct {
	opts     Params
	pageSize int // each cluster's page in a list without limit (Config.PageSize; tests set less)
}

// New returns the fan-out; Gateways, Authorizer and Serve are required.
func New(opts Params) (*FanOut, error) {
	if opts.Gateways == nil || opts.Authorizer == nil || opts.Serve == nil {
		return nil, fmt.Errorf("fanout: Params.Gateways, Authorizer and Serve are required")
	}
	opts.Serve = auditedServe(opts.Serve)
	pageSize := opts.Config.PageSize
	if pageSize < 1 {
		pageSize = DefaultPageSize
	}
	return &FanOut{opts: opts, pageSize: pageSize}, nil
}

var codecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return serializer.NewCodecFactory(s)
}()

var groupResource = schema.GroupResource{Group: v1alpha1.GroupName, Resource: Resource}

func writeStatus(w http.ResponseWriter, req *http.Request, err error) {
	responsewriters.ErrorNegotiated(err, codecs, v1alpha1.SchemeGroupVersion, w, req)
}

var innerRequestInfo = &apirequest.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

// innerInfo is the request as each cluster sees it.
func innerInfo(req *http.Request, subpath string) (*apirequest.RequestInfo, error) {
	if !strings.HasPrefix(subpath, "/") {
		subpath = "/" + subpath
	}
	u := *req.URL
	u.Path, u.RawPath = subpath, ""
	return innerRequestInfo.NewRequestInfo(&http.Request{Method: req.Method, URL: &u, Header: req.Header})
}

// IsLongRunning is next, but for the proxy subresource of a set, which runs
// long when its inner request is a watch. isSet is proxy.IsSetProxy.
func IsLongRunning(next apirequest.LongRunningRequestCheck, isSet func(*apirequest.RequestInfo) bool) apirequest.LongRunningRequestCheck {
	return func(r *http.Request, ri *apirequest.RequestInfo) bool {
		if !isSet(ri) {
			return next(r, ri)
		}
		in, err := innerInfo(r, "/"+strings.Join(ri.Parts[3:], "/"))
		return err == nil && in.Verb == "watch"
	}
}

// Serve serves one request to the proxy subresource of the set named set;
// subpath is the path on each cluster.
func (f *FanOut) Serve(w http.ResponseWriter, req *http.Request, set, subpath string) {
	if req.Method != http.MethodGet || httpstream.IsUpgradeRequest(req) {
		writeStatus(w, req, methodNotAllowed(req.Method))
		return
	}
	sel, err := ParseSelection(set)
	if err != nil {
		writeStatus(w, req, err)
		return
	}
	u, ok := apirequest.UserFrom(req.Context())
	if !ok {
		writeStatus(w, req, apierrors.NewInternalError(fmt.Errorf("no hub user on the request")))
		return
	}
	in, err := innerInfo(req, subpath)
	if err != nil {
		writeStatus(w, req, apierrors.NewBadRequest(fmt.Sprintf("cannot parse the proxied path %q: %v", subpath, err)))
		return
	}
	clusters, err := f.allowed(req.Context(), u, sel)
	if err != nil {
		writeStatus(w, req, err)
		return
	}
	auditClusters(req.Context(), clusters)
	req = req.WithContext(withSetAudit(req.Context()))
	switch {
	case !in.IsResourceRequest:
		// Discovery, /version, OpenAPI: what kubectl reads before it lists.
		// One cluster answers for the set: the first by name.
		if len(clusters) == 0 {
			writeStatus(w, req, apierrors.NewServiceUnavailable(fmt.Sprintf(
				"clustersets/%s holds no ClusterGateway you may use (get on clustergateways/proxy), so none can answer %s", set, subpath)))
			return
		}
		f.opts.Serve(w, req.WithContext(audit.WithAuditContext(req.Context())), clusters[0], subpath)
	case in.Subresource != "":
		writeStatus(w, req, apierrors.NewBadRequest(fmt.Sprintf(
			"%s/%s is not served through a set of clusters: a set lists and watches; use the ClusterGateway's own proxy (clustergateways/<name>/proxy)", in.Resource, in.Subresource)))
	case in.Verb == "watch":
		f.watch(w, req, clusters, subpath)
	case in.Verb == "list", in.Verb == "get":
		f.list(w, req, set, clusters, subpath, in.Verb == "get")
	default:
		writeStatus(w, req, methodNotAllowed(in.Verb))
	}
}

func methodNotAllowed(verb string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusMethodNotAllowed, Reason: metav1.StatusReasonMethodNotAllowed,
		Details: &metav1.StatusDetails{Group: groupResource.Group, Kind: Resource},
		Message: fmt.Sprintf("%s is not allowed through a set of clusters, which is read-only (get, list, watch): write through each ClusterGateway's own proxy (clustergateways/<name>/proxy)", verb),
	}}
}

// allowed is the set's clusters on which u may use the proxy (get on
// clustergateways/proxy, as the hub authorizes a GET of one cluster's
// proxy), sorted by name. A cluster that does not exist and one u may not
// use are left out alike, and named nowhere.
func (f *FanOut) allowed(ctx context.Context, u user.Info, sel Selection) ([]string, error) {
	var names []string
	if sel.Selector != nil {
		var err error
		if names, err = f.opts.Gateways.Names(sel.Selector); err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		slices.Sort(names)
	} else {
		for _, n := range sel.Names {
			if f.opts.Gateways.Exists(n) {
				names = append(names, n)
			}
		}
	}
	out := names[:0]
	for _, n := range names {
		d, _, err := f.opts.Authorizer.Authorize(ctx, authorizer.AttributesRecord{
			User: u, Verb: "get", APIGroup: v1alpha1.GroupName, APIVersion: v1alpha1.SchemeGroupVersion.Version,
			Resource: "clustergateways", Subresource: "proxy", Name: n, ResourceRequest: true,
		})
		if err == nil && d == authorizer.DecisionAllow {
			out = append(out, n)
		}
	}
	return out, nil
}

// warn adds a Warning header for one cluster (kubectl prints it).
func warn(ctx context.Context, cluster, msg string) {
	warning.AddWarning(ctx, "", fmt.Sprintf("cluster %q: %s", cluster, msg))
}
