package proxy

import (
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/sets"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericfilters "k8s.io/apiserver/pkg/server/filters"

	"github.com/clustergateway/cluster-gateway/pkg/fairness"
)

var defaultLongRunning = genericfilters.BasicLongRunningRequestCheck(sets.NewString("watch"), sets.NewString())

// streamingSubresources are the managed cluster's own long-running subresources
// (logs only when followed, see IsLongRunning).
var streamingSubresources = sets.NewString("exec", "attach", "portforward", "proxy")

// IsLongRunning exempts the proxied requests that stream (watch, logs -f,
// exec, attach, port-forward, pod and service proxy, any upgrade) from the
// gateway's request timeout, and keeps every other proxied request under it
// and under the in-flight limit. The hub exempts the whole proxy subresource,
// so this is where ordinary requests are held to their timeout.
func IsLongRunning(r *http.Request, ri *apirequest.RequestInfo) bool {
	if !isProxy(ri) {
		return defaultLongRunning(r, ri)
	}
	return parseInner(r, ri, innerPath(ri)).kind != kindRequest
}

// The kinds of proxied request, also the metrics' kind label.
const (
	kindRequest = "request" // ordinary: held to the request timeout
	kindStream  = "stream"  // watch, logs -f and other long-running
	kindUpgrade = "upgrade" // exec, attach, port-forward
)

// kindOf says how a proxied request runs; in is its inner request (nil when
// the path does not parse, which makes it ordinary unless it upgrades).
func kindOf(r *http.Request, in *apirequest.RequestInfo) string {
	if httpstream.IsUpgradeRequest(r) {
		return kindUpgrade
	}
	if in == nil {
		return kindRequest
	}
	switch {
	case in.Verb == "watch", streamingSubresources.Has(in.Subresource):
		return kindStream
	case in.Subresource == "log":
		if f := strings.ToLower(r.URL.Query().Get("follow")); f == "true" || f == "1" {
			return kindStream
		}
	}
	return kindRequest
}

// limitKind is what a kind of request counts against in the per-cluster
// limiter: upgrades are long-running like streams.
func limitKind(kind string) fairness.Kind {
	if kind == kindRequest {
		return fairness.Request
	}
	return fairness.Stream
}
