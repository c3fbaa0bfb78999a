package proxy

import (
	"context"
	"strings"

	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authentication/user"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
)

// The audit annotations of a proxied request (docs/audit.md). The hub's and
// the gateway's audit events record the outer request (clustergateways/proxy);
// these say what it was on the managed cluster and as whom it was sent.
// Values are names, never credentials.
const (
	AuditPrefix = "proxy." + v1alpha1.GroupName + "/"

	AuditCluster        = AuditPrefix + "cluster"
	AuditInnerVerb      = AuditPrefix + "inner-verb"
	AuditInnerGroup     = AuditPrefix + "inner-api-group"
	AuditInnerVersion   = AuditPrefix + "inner-api-version"
	AuditInnerResource  = AuditPrefix + "inner-resource"
	AuditInnerSubres    = AuditPrefix + "inner-subresource"
	AuditInnerNamespace = AuditPrefix + "inner-namespace"
	AuditInnerName      = AuditPrefix + "inner-name"
	AuditInnerPath      = AuditPrefix + "inner-path" // non-resource requests, and paths that do not parse
	// AuditImpersonation is the gateway's impersonation mode (None, Caller);
	// AuditIdentity is whom the cluster acts for: the hub caller's user name
	// in Caller mode, else the stored credential (AuditAuthenticatedAs);
	// AuditAuthenticatedAs is the stored credential as the gateway knows it
	// without revealing it: "x509:<certificate subject>" or "bearer-token".
	AuditImpersonation   = AuditPrefix + "impersonation"
	AuditIdentity        = AuditPrefix + "identity"
	AuditAuthenticatedAs = AuditPrefix + "authenticated-as"
)

// auditInner annotates the audit event with the cluster and the inner
// request (in is nil when its path does not parse). It runs before any
// check, so a refused request is recorded with what it asked for; a path
// the proxy refuses (checkSubpath) is recorded as sent, not as parsed.
func auditInner(ctx context.Context, cluster, subpath string, in *apirequest.RequestInfo) {
	if !auditing(ctx) {
		return
	}
	kv := []string{AuditCluster, cluster}
	add := func(k, v string) {
		if v != "" {
			kv = append(kv, k, v)
		}
	}
	switch {
	case in == nil, checkSubpath(subpath) != nil:
		add(AuditInnerPath, "/"+strings.TrimPrefix(subpath, "/"))
	case in.IsResourceRequest:
		add(AuditInnerVerb, in.Verb)
		add(AuditInnerGroup, in.APIGroup)
		add(AuditInnerVersion, in.APIVersion)
		add(AuditInnerResource, in.Resource)
		add(AuditInnerSubres, in.Subresource)
		add(AuditInnerNamespace, in.Namespace)
		add(AuditInnerName, in.Name)
	default:
		add(AuditInnerVerb, in.Verb)
		add(AuditInnerPath, in.Path)
	}
	audit.AddAuditAnnotations(ctx, kv...)
}

// auditIdentity annotates the audit event with the identity the request is
// sent to the cluster with. It runs only for requests that are sent.
func auditIdentity(ctx context.Context, gw *gateways.Gateway, caller user.Info) {
	if !auditing(ctx) {
		return
	}
	spec := gw.Object.Spec
	as := "bearer-token"
	if spec.Credential.Type == v1alpha1.CredentialX509Certificate {
		as = "x509"
		if c := gw.Object.Status.Credential; c != nil && c.Subject != "" {
			as += ":" + c.Subject
		}
	}
	mode, identity := string(v1alpha1.ImpersonationNone), as
	if spec.Impersonation.Mode == v1alpha1.ImpersonationCaller && caller != nil {
		mode, identity = string(v1alpha1.ImpersonationCaller), caller.GetName()
	}
	audit.AddAuditAnnotations(ctx, AuditImpersonation, mode, AuditIdentity, identity, AuditAuthenticatedAs, as)
}

// auditing tells whether the request's audit event records annotations: the
// server's audit filter has evaluated the policy (it runs before any
// handler) to Metadata or more. Without audit flags there is no policy, and
// nothing is computed per request.
func auditing(ctx context.Context) bool {
	ac := audit.AuditContextFrom(ctx)
	return ac != nil && ac.GetEventLevel().GreaterOrEqual(auditinternal.LevelMetadata)
}
