package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"golang.org/x/net/http2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/klog/v2"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/endpointpolicy"
)

var proxyResource = schema.GroupResource{Group: v1alpha1.GroupName, Resource: "clustergateways/proxy"}

// upstreamError turns a failure to reach a managed cluster into a Status a
// user can act on: 502 when its certificate is not trusted, 503 when it cannot
// be reached (a dial or handshake that ran out of time included), 504 when
// the request's own deadline passed while the cluster was answering.
func upstreamError(cluster string, err error, requestExpired bool) *apierrors.StatusError {
	var (
		recordErr tls.RecordHeaderError
		netErr    net.Error
	)
	switch {
	case errors.Is(err, endpointpolicy.ErrDenied):
		return endpointDenied(cluster, err)
	case strings.Contains(err.Error(), "invalid upgrade response: status code"):
		// UpgradeAwareHandler's words for an answer that neither switched
		// protocols nor failed, such as a redirect: not passed on.
		return statusError(http.StatusBadGateway, metav1.StatusReasonInternalError, fmt.Sprintf(
			"cluster %q did not switch protocols for the upgrade (%v); the gateway does not pass redirects or other non-upgrade answers on: check spec.endpoint.address of ClusterGateway %q",
			cluster, err, cluster))
	case untrustedCertificate(err):
		return statusError(http.StatusBadGateway, metav1.StatusReasonInternalError, fmt.Sprintf(
			"the API server of cluster %q presented a certificate the gateway does not trust (%v): check spec.endpoint.caBundle and spec.endpoint.serverName of ClusterGateway %q",
			cluster, err, cluster))
	case oversizedHeaders(err):
		return statusError(http.StatusBadGateway, metav1.StatusReasonInternalError, fmt.Sprintf(
			"cluster %q answered with response headers the gateway does not accept (over 1 MiB, or not decodable): %v", cluster, err))
	case strings.Contains(err.Error(), "timeout awaiting response headers"):
		return statusError(http.StatusGatewayTimeout, metav1.StatusReasonTimeout, fmt.Sprintf(
			"cluster %q accepted the request but sent no response headers within --upstream-response-header-timeout (%v)", cluster, err))
	case errors.As(err, &recordErr):
		return statusError(http.StatusBadGateway, metav1.StatusReasonInternalError, fmt.Sprintf(
			"cluster %q did not answer with TLS (%v): spec.endpoint.address must be the https address of its API server", cluster, err))
	case errors.Is(err, context.DeadlineExceeded) && requestExpired:
		return statusError(http.StatusGatewayTimeout, metav1.StatusReasonTimeout, fmt.Sprintf(
			"cluster %q did not answer in time: %v", cluster, err))
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, errUpgradeDial):
		return statusError(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, fmt.Sprintf(
			"cluster %q is unreachable: no connection within the dial timeout (%v)", cluster, err))
	case errors.As(err, &netErr) && netErr.Timeout():
		return statusError(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, fmt.Sprintf(
			"cluster %q is unreachable: the connection timed out (%v)", cluster, err))
	}
	return statusError(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, fmt.Sprintf(
		"cluster %q is unreachable: %v", cluster, err))
}

// oversizedHeaders tells whether err is a cluster's response headers
// refused for their size: over HTTP/2 (SETTINGS_MAX_HEADER_LIST_SIZE, which
// x/net enforces by ending the connection with COMPRESSION_ERROR), over
// HTTP/1.1, or before an upgrade is set up.
func oversizedHeaders(err error) bool {
	var connErr http2.ConnectionError
	return errors.Is(err, errUpgradeHeaderTooLarge) ||
		(errors.As(err, &connErr) && http2.ErrCode(connErr) == http2.ErrCodeCompression) ||
		strings.Contains(err.Error(), "server response headers exceeded")
}

// untrustedCertificate tells whether err is the cluster's certificate failing
// verification (unknown CA, wrong name, expired or otherwise invalid).
func untrustedCertificate(err error) bool {
	var (
		verifyErr   *tls.CertificateVerificationError
		unknownCA   x509.UnknownAuthorityError
		hostnameErr x509.HostnameError
		invalidErr  x509.CertificateInvalidError
	)
	return errors.As(err, &verifyErr) || errors.As(err, &unknownCA) || errors.As(err, &hostnameErr) || errors.As(err, &invalidErr)
}

// endpointDenied is the answer when the endpoint policy refuses where a
// ClusterGateway points: the request never left the gateway.
func endpointDenied(cluster string, err error) *apierrors.StatusError {
	return statusError(http.StatusForbidden, metav1.StatusReasonForbidden, fmt.Sprintf(
		"the gateway may not connect to cluster %q: %v; the gateway's operator sets --endpoint-deny-cidrs and --endpoint-allow-cidrs", cluster, err))
}

func statusError(code int32, reason metav1.StatusReason, message string) *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    code,
		Reason:  reason,
		Message: message,
		Details: &metav1.StatusDetails{Group: proxyResource.Group, Kind: proxyResource.Resource},
	}}
}

// responder writes upstream failures as Status objects in the content type
// the client asked for, and asks for a probe of a cluster it could not reach.
type responder struct {
	cluster string
	health  Health
}

func (r responder) Error(w http.ResponseWriter, req *http.Request, err error) {
	if cause := context.Cause(req.Context()); errors.Is(cause, errUpgradeDial) {
		err = fmt.Errorf("%w: %v", cause, err)
	} else if errors.Is(err, context.Canceled) && req.Context().Err() != nil {
		return // the client went away; nobody is listening
	} else if errors.Is(req.Context().Err(), context.DeadlineExceeded) {
		// The request's own deadline passed: serve answers 504 Timeout as
		// it returns (answerTimeout), whatever the proxy was waiting for.
		return
	}
	status := upstreamError(r.cluster, err, errors.Is(req.Context().Err(), context.DeadlineExceeded))
	if r.health != nil && status.ErrStatus.Code != http.StatusGatewayTimeout {
		r.health.ProbeNow(r.cluster) // unreachable or untrusted now: the prober should know soon
	}
	klog.V(2).InfoS("Proxying to cluster failed", "cluster", r.cluster, "code", status.ErrStatus.Code, "err", err)
	writeStatus(w, req, status)
}

func writeStatus(w http.ResponseWriter, req *http.Request, err error) {
	responsewriters.ErrorNegotiated(err, codecs, schema.GroupVersion{Group: v1alpha1.GroupName, Version: "v1alpha1"}, w, req)
}
