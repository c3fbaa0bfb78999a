package proxy

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// authorizeUpgrade requires create on clustergateways/proxy for exec,
// attach and port-forward. Over WebSocket they are GET requests, which the
// generic server authorizes as get; since Kubernetes 1.35 a cluster also
// requires create for them on its own pods, and so does the gateway, so that
// read-only proxy access never runs commands.
func (p *Proxy) authorizeUpgrade(ctx context.Context, u user.Info, name string) error {
	attrs := authorizer.AttributesRecord{
		User:            u,
		Verb:            "create",
		APIGroup:        v1alpha1.GroupName,
		APIVersion:      v1alpha1.SchemeGroupVersion.Version,
		Resource:        "clustergateways",
		Subresource:     "proxy",
		Name:            name,
		ResourceRequest: true,
	}
	decision, reason, err := p.opts.Authorizer.Authorize(ctx, attrs)
	if decision == authorizer.DecisionAllow {
		return nil
	}
	msg := fmt.Sprintf("user %q may not create clustergateways/proxy of %q: exec, attach and port-forward need create, not only get, on clustergateways/proxy", u.GetName(), name)
	return forbidden(msg, reason, err)
}

// authorizeInner checks the inner request against the hub's authorizer when
// --authorize-proxy-subpath is on. An upgrade (exec, attach, port-forward
// over WebSocket is a GET) is also checked as create on the inner
// subresource, as the cluster itself would since Kubernetes 1.35.
func (p *Proxy) authorizeInner(req *http.Request, u user.Info, subpath string, in *apirequest.RequestInfo, inErr error, upgrade bool) error {
	if !p.opts.AuthorizeSubpath {
		return nil
	}
	if inErr != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("cannot parse the proxied path %q: %v", subpath, inErr))
	}
	attrs := authorizer.AttributesRecord{
		User:            u,
		Verb:            in.Verb,
		Namespace:       in.Namespace,
		APIGroup:        in.APIGroup,
		APIVersion:      in.APIVersion,
		Resource:        in.Resource,
		Subresource:     in.Subresource,
		Name:            in.Name,
		ResourceRequest: in.IsResourceRequest,
		Path:            in.Path,
	}
	verbs := []string{in.Verb}
	if upgrade && in.IsResourceRequest && in.Verb != "create" {
		verbs = append(verbs, "create")
	}
	for _, verb := range verbs {
		attrs.Verb = verb
		decision, reason, err := p.opts.Authorizer.Authorize(req.Context(), attrs)
		if decision == authorizer.DecisionAllow {
			continue
		}
		what := in.Path
		if in.IsResourceRequest {
			what = fmt.Sprintf("%s %s", verb, strings.Trim(in.Resource+"/"+in.Subresource, "/"))
			if in.Namespace != "" {
				what += " in namespace " + in.Namespace
			}
		}
		return forbidden(fmt.Sprintf("the hub does not allow %q to %s through the gateway", u.GetName(), what), reason, err)
	}
	return nil
}

func forbidden(msg, reason string, err error) error {
	if reason != "" {
		msg += ": " + reason
	}
	if err != nil {
		msg += fmt.Sprintf(" (%v)", err)
	}
	return apierrors.NewForbidden(proxyResource, "", fmt.Errorf("%s", msg))
}
