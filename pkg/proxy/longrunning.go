package proxy

import (
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/sets"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
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
	if httpstream.IsUpgradeRequest(r) {
		return true
	}
	in, err := innerInfo(r, innerPath(ri))
	if err != nil {
		return false
	}
	switch {
	case in.Verb == "watch":
		return true
	case streamingSubresources.Has(in.Subresource):
		return true
	case in.Subresource == "log":
		f := strings.ToLower(r.URL.Query().Get("follow"))
		return f == "true" || f == "1"
	}
	return false
}
