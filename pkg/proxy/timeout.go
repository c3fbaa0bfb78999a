package proxy

import (
	"context"
	"errors"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/endpoints/metrics"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
)

// IsProxyRequest tells the handler chain which requests are the proxy's.
// The proxy ends them at their deadline itself, so the generic server's
// timeout filter need not run them in a goroutine of their own (streams and
// upgrades have no deadline; an ordinary request gets the request-deadline
// filter's, and everything the proxy waits on, the per-cluster queue, the
// dial, the cluster's answer, ends with the request's context).
func IsProxyRequest(ri *apirequest.RequestInfo) bool { return isProxy(ri) }

// answerTimeout answers an ordinary request whose deadline passed before
// any answer was written, as the generic server's timeout filter would: its
// 504 Timeout Status, counted in apiserver_request_terminations_total. When
// the answer had begun (the cluster's body was still coming), the reverse
// proxy has already aborted the stream.
func answerTimeout(w http.ResponseWriter, req *http.Request, rec *statusRecorder) {
	if rec.code != 0 || !errors.Is(req.Context().Err(), context.DeadlineExceeded) {
		return
	}
	if ri, ok := apirequest.RequestInfoFrom(req.Context()); ok {
		metrics.RecordRequestTermination(req, ri, metrics.APIServerComponent, http.StatusGatewayTimeout)
	}
	writeStatus(w, req, apierrors.NewTimeoutError("request did not complete within the allotted timeout", 0))
}
