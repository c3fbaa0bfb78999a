package apiserver

import (
	"context"
	"net/http"

	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/filters/impersonation"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericfeatures "k8s.io/apiserver/pkg/features"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
	"k8s.io/apiserver/pkg/server/routine"
	flowcontrolrequest "k8s.io/apiserver/pkg/util/flowcontrol/request"

	"github.com/clustergateway/cluster-gateway/pkg/proxy"
)

// buildHandlerChain is k8s.io/apiserver's DefaultBuildHandlerChain (v0.37;
// TestHandlerChainFollowsUpstream fails when an upgrade changes it, so the
// change is carried over here), the same filters in the same order, but for
// what a proxied request costs
// there and does not need (a proxied request passes the chain hundreds of
// times a second; docs/performance.md has the profiles):
//
//   - The timeout filter runs every ordinary request in a goroutine of its
//     own, so that it can answer 504 while the handler is still busy; its new
//     stack is copied each time it doubles through the chain. A proxied
//     ordinary request still gets its deadline (the request-deadline filter
//     sets it, as before), and the proxy, which waits on nothing that ignores
//     its context, answers the 504 itself when it passes (proxy.Config).
//     Every other request keeps the filter.
//   - The tracing filter (otelhttp) runs only when tracing is configured
//     (--tracing-config-file); with the no-op tracer it still wrapped every
//     request and recorded OpenTelemetry metrics nobody exports.
//   - The per-filter latency trackers (the filterlatency package: spans and
//     apiserver_request_filter_duration_seconds) are left out, and a proxied
//     request gets no request latency trackers (a dozen objects per request
//     that time webhooks, storage and serialization, none of which it has;
//     its apiserver_request_duration_seconds is recorded as before, and
//     apiserver_request_sli_duration_seconds, the same figure less that
//     time, is not).
//   - Outermost, each request gets the memo in which its inner request is
//     parsed once (withInnerMemo), and before that its goroutine's stack is
//     grown while it is shallow (withGrownStack), not copied deep in the
//     chain.
//   - Innermost, the proxy subresource is served by proxy.Route, not by the
//     REST handler's routing and connect handler (same metrics, methods,
//     name and subpath); everything else goes on to the REST handler.
//
// Shutdown's Retry-After and watch-termination filters need the generic
// server's own lifecycle signals and are not here: their flags are refused
// (cmd/apiserver/app/options), and the gateway ends proxied watches on
// shutdown itself (--shutdown-stream-drain). The mux is complete before the
// server serves (every route is installed in New), so requests are never
// marked as arriving before it.
func buildHandlerChain(apiHandler http.Handler, c *genericapiserver.Config, tracing, growStack bool, route *proxy.Route) http.Handler {
	handler := route.Handler(apiHandler)
	handler = genericapifilters.WithAuthorization(handler, c.Authorization.Authorizer, c.Serializer)
	if c.FlowControl != nil {
		workEstimatorCfg := flowcontrolrequest.DefaultWorkEstimatorConfig()
		requestWorkEstimator := flowcontrolrequest.NewWorkEstimator(
			c.StorageObjectCountTracker.Get, c.FlowControl.GetInterestedWatchCount, workEstimatorCfg, c.FlowControl.GetMaxSeats)
		handler = genericfilters.WithPriorityAndFairness(handler, c.LongRunningFunc, c.FlowControl, requestWorkEstimator, c.RequestTimeout/4)
	} else {
		handler = genericfilters.WithMaxInFlightLimit(handler, c.MaxRequestsInFlight, c.MaxMutatingRequestsInFlight, c.LongRunningFunc)
	}
	if c.FeatureGate.Enabled(genericfeatures.ConstrainedImpersonation) {
		handler = impersonation.WithConstrainedImpersonation(handler, c.Authorization.Authorizer, c.Serializer)
	} else {
		handler = impersonation.WithImpersonation(handler, c.Authorization.Authorizer, c.Serializer)
	}
	handler = genericapifilters.WithAudit(handler, c.AuditBackend, c.AuditPolicyRuleEvaluator, c.LongRunningFunc)
	failedHandler := genericapifilters.Unauthorized(c.Serializer)
	failedHandler = genericapifilters.WithFailedAuthenticationAudit(failedHandler, c.AuditBackend, c.AuditPolicyRuleEvaluator)
	if tracing {
		handler = genericapifilters.WithTracing(handler, c.TracerProvider)
	}
	handler = genericapifilters.WithAuthentication(handler, c.Authentication.Authenticator, failedHandler, c.Authentication.APIAudiences, c.Authentication.RequestHeaderConfig)
	handler = genericfilters.WithCORS(handler, c.CorsAllowedOriginList, nil, nil, nil, "true")
	handler = genericapifilters.WithWarningRecorder(handler)
	handler = genericfilters.WithTimeoutForNonLongRunningRequests(handler, timeoutExempt(c.LongRunningFunc))
	handler = genericapifilters.WithRequestDeadline(handler, c.AuditBackend, c.AuditPolicyRuleEvaluator,
		c.LongRunningFunc, c.Serializer, c.RequestTimeout)
	handler = genericfilters.WithWaitGroup(handler, c.LongRunningFunc, c.NonLongRunningRequestWaitGroup)
	if c.SecureServing != nil && !c.SecureServing.DisableHTTP2 && c.GoawayChance > 0 {
		handler = genericfilters.WithProbabilisticGoaway(handler, c.GoawayChance)
	}
	handler = genericapifilters.WithCacheControl(handler)
	handler = genericfilters.WithHSTS(handler, c.HSTSDirectives)
	handler = genericfilters.WithHTTPLogging(handler)
	handler = withLatencyTrackersExceptProxy(handler)
	if c.FeatureGate.Enabled(genericfeatures.APIServingWithRoutine) {
		handler = routine.WithRoutine(handler, c.LongRunningFunc)
	}
	handler = genericapifilters.WithRequestInfo(handler, c.RequestInfoResolver)
	handler = genericapifilters.WithRequestReceivedTimestamp(handler)
	handler = genericfilters.WithPanicRecovery(handler, c.RequestInfoResolver)
	handler = genericapifilters.WithAuditInit(handler)
	handler = withInnerMemo(handler)
	if growStack {
		handler = withGrownStack(handler)
	}
	return handler
}

// withInnerMemo gives each request a proxy.InnerMemo, in which the inner
// request of a proxied request is parsed once for the filters'
// IsLongRunning and the proxy (pkg/proxy/memo.go says what it saves). It is
// a plain context value, so that reading the context runs no code of the
// proxy's.
func withInnerMemo(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		next.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), proxy.InnerMemoKey, new(proxy.InnerMemo))))
	})
}

// timeoutExempt is what the timeout filter leaves alone: the long-running
// requests, and every proxied request (the proxy ends an ordinary one at its
// deadline itself).
func timeoutExempt(longRunning apirequest.LongRunningRequestCheck) apirequest.LongRunningRequestCheck {
	return func(r *http.Request, ri *apirequest.RequestInfo) bool {
		return proxy.IsProxyRequest(ri) || longRunning(r, ri)
	}
}

// withLatencyTrackersExceptProxy is the generic server's latency-tracker
// filter for every request but the proxied ones.
func withLatencyTrackersExceptProxy(next http.Handler) http.Handler {
	tracked := genericapifilters.WithLatencyTrackers(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ri, ok := apirequest.RequestInfoFrom(r.Context()); ok && proxy.IsProxyRequest(ri) {
			next.ServeHTTP(w, r)
			return
		}
		tracked.ServeHTTP(w, r)
	})
}
