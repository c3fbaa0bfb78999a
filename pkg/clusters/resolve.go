package clusters

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/credentials"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
)

// inputs is what a gateway's credential was resolved from: the stored
// gateway, and the version of its source (a Secret as the store's cache
// holds it, and whether its namespace could be read; or its provider's
// latest state). The same inputs resolve to the same gateway, so a record
// resolves again only after one of them changed.
type inputs struct {
	stored *gateways.Gateway
	src    *gateways.Source
	access gateways.Access
	prov   *credentials.State
}

// inputsOf is what g resolves against now.
func (o *Owner) inputsOf(g *gateways.Gateway) inputs {
	in := inputs{stored: g}
	if c := o.providerCluster(g); c != nil {
		in.prov = o.cfg.Providers.Latest(c)
		return in
	}
	if ref := g.Object.Spec.Credential.SecretRef; g.Object.Spec.Credential.Type == v1alpha1.CredentialSecretRef && ref != nil {
		in.src, in.access = o.cfg.Store.Source(ref)
	}
	return in
}

// resolve is the gateway in's inputs make, as of now: the stored gateway
// itself when its credential is stored in it. reason is why its source
// cannot be used (empty: it can, or it has none).
func (o *Owner) resolve(in inputs, now time.Time) (g *gateways.Gateway, reason string) {
	var r gateways.Resolution
	switch g = in.stored; {
	case o.providerCluster(g) != nil:
		r = fromProvider(g.Object, in.prov)
	case g.Object.Spec.Credential.Type == v1alpha1.CredentialSecretRef && g.Object.Spec.Credential.SecretRef != nil:
		r = fromSource(g.Object, in.src, in.access)
	default:
		return g.At(now), ""
	}
	return g.WithResolution(r, now), r.Reason
}

// count adds a new resolution to the store's credential metrics: a source
// that cannot be used, a provider's new credential. prev is what the record
// resolved before (zero: nothing).
func (o *Owner) count(prev, in inputs, reason string) {
	m := o.cfg.Store.Metrics()
	if st := in.prov; st != nil {
		switch {
		case st.Problem != "":
			m.SourceFailed(gateways.SourceKindProvider, v1alpha1.ReasonProviderFailed)
		case prev.prov != nil && prev.prov.Problem == "" && prev.prov.Rotated.Before(st.Rotated):
			m.Rotated(gateways.SourceKindProvider)
		}
		return
	}
	if reason != "" && in.stored.Object.Spec.Credential.Type == v1alpha1.CredentialSecretRef {
		m.SourceFailed(gateways.SourceKindSecret, reason)
	}
}

// fromSource resolves a SecretRef gateway against its Secret: src is nil
// when the Secret does not exist or its namespace cannot be read (acc). The
// spec's endpoint fields win; what it leaves out comes from the Secret (a
// kubeconfig's server, CA and TLS server name, or ca.crt).
func fromSource(obj *v1alpha1.ClusterGateway, src *gateways.Source, acc gateways.Access) gateways.Resolution {
	ref := obj.Spec.Credential.SecretRef
	r := gateways.Resolution{Conn: gateways.Conn{Endpoint: obj.Spec.Endpoint}, Source: fmt.Sprintf("Secret %s/%s", ref.Namespace, ref.Name)}
	fail := func(reason, format string, args ...interface{}) gateways.Resolution {
		r.Reason, r.Message = reason, fmt.Sprintf("%s %s", r.Source, fmt.Sprintf(format, args...))
		return r
	}
	switch acc {
	case gateways.NotListed:
		return fail(v1alpha1.ReasonSourceNotRead, "is in a namespace this gateway does not read: add %q to its --credential-source-namespaces (and let it get, list and watch Secrets there)", ref.Namespace)
	case gateways.NotSynced:
		return fail(v1alpha1.ReasonSourceNotRead, "cannot be read yet: the gateway has not listed the Secrets of namespace %q; check that it may get, list and watch Secrets there (its log says why)", ref.Namespace)
	}
	if src == nil {
		return fail(v1alpha1.ReasonSourceNotFound, "does not exist: create it, or point spec.credential.secretRef at the Secret that holds the credential")
	}
	r.Rotated = src.Rotated()
	m := src.Material(ref.Format)
	if m.Format != "" {
		r.Source += " (" + string(m.Format) + ")"
	}
	if m.Problem != "" {
		return fail(v1alpha1.ReasonSourceMalformed, "%s", m.Problem)
	}
	ep := &r.Conn.Endpoint
	if ep.Address == "" {
		if ep.Address = m.Server; ep.Address == "" {
			return fail(v1alpha1.ReasonSourceMalformed, "names no server (only a kubeconfig does): set spec.endpoint.address")
		}
	}
	if !ep.InsecureSkipTLSVerify {
		if len(ep.CABundle) == 0 {
			ep.CABundle = m.CABundle
		}
		if ep.ServerName == "" {
			ep.ServerName = m.ServerName
		}
		if m.Insecure && len(ep.CABundle) == 0 {
			return fail(v1alpha1.ReasonSourceMalformed, "skips TLS verification of the server (insecure-skip-tls-verify): the gateway verifies unless spec.endpoint.insecureSkipTLSVerify is true")
		}
	}
	if _, err := v1alpha1.ParseAddress(ep.Address); err != nil {
		return fail(v1alpha1.ReasonSourceMalformed, "has a server that cannot be used: %v", err)
	}
	if len(ep.CABundle) > 0 {
		if _, err := v1alpha1.ParseCABundle(ep.CABundle); err != nil {
			return fail(v1alpha1.ReasonSourceMalformed, "has a CA that %v", err)
		}
	}
	if len(m.Cert) > 0 {
		pair, err := v1alpha1.ParseKeyPair(m.Cert, m.Key)
		if err != nil {
			return fail(v1alpha1.ReasonSourceMalformed, "has a client certificate whose %v", err)
		}
		if !v1alpha1.ClientAuthUsable(pair.Leaf) {
			return fail(v1alpha1.ReasonSourceMalformed, "has a client certificate that is not valid for client authentication (its extended key usage lacks clientAuth)")
		}
	}
	if m.Token != "" {
		if err := v1alpha1.CheckToken(m.Token); err != nil {
			return fail(v1alpha1.ReasonSourceMalformed, "has a token that %v", err)
		}
	}
	r.Conn.Token, r.Conn.Cert, r.Conn.Key, r.TokenExpiry = m.Token, m.Cert, m.Key, m.TokenExpiry
	return r
}

// providerCluster is what g gives its provider; nil unless g's credential
// comes from a configured provider.
func (o *Owner) providerCluster(g *gateways.Gateway) *credentials.Cluster {
	cred := g.Object.Spec.Credential
	if cred.Type != v1alpha1.CredentialProvider || cred.Provider == nil || o.cfg.Providers == nil {
		return nil
	}
	ep := g.Object.Spec.Endpoint
	c := &credentials.Cluster{Gateway: g.Name(), Provider: cred.Provider.Name, Server: ep.Address, CAData: ep.CABundle,
		ServerName: ep.ServerName, Insecure: ep.InsecureSkipTLSVerify, ProxyURL: ep.ProxyURL}
	if cred.Provider.Config != nil {
		c.Config = cred.Provider.Config.Raw
	}
	c.AdditionalArgs = cred.Provider.AdditionalArgs
	for _, e := range cred.Provider.AdditionalEnv {
		c.AdditionalEnv = append(c.AdditionalEnv, credentials.EnvVar{Name: e.Name, Value: e.Value})
	}
	return c
}

// fromProvider is obj's connection with its provider's credential st (nil:
// the provider has not run yet for this version; a request runs it).
func fromProvider(obj *v1alpha1.ClusterGateway, st *credentials.State) gateways.Resolution {
	r := gateways.Resolution{Conn: gateways.Conn{Endpoint: obj.Spec.Endpoint}, Source: "Provider " + obj.Spec.Credential.Provider.Name}
	if st == nil {
		return r
	}
	r.Rotated = metav1.NewTime(st.Rotated)
	if st.Problem != "" {
		r.Reason, r.Message = v1alpha1.ReasonProviderFailed, st.Problem
		return r
	}
	r.Conn.Token, r.Conn.Cert, r.Conn.Key = st.Token, st.Cert, st.Key
	r.TokenExpiry = gateways.JWTExpiry(st.Token)
	r.Expires = st.Expires // the certificate's notAfter when the ExecCredential said nothing: the same
	return r
}

// GetForRequest is Get for a proxied request: a gateway whose credential
// comes from a provider has it from the provider now (which runs it when
// client-go has none, or it is about to expire), within the provider's
// timeout or until ctx ends.
func (o *Owner) GetForRequest(ctx context.Context, name string) (*gateways.Gateway, error) {
	g, err := o.storedForRequest(ctx, name)
	if err != nil {
		return nil, err
	}
	return o.Resolve(g), nil
}

// storedForRequest returns the named gateway as stored, after its provider,
// if its credential comes from one, has given it a credential for this
// request (GetForRequest); or a NotFound error, or ServiceUnavailable when
// the provider did not.
func (o *Owner) storedForRequest(ctx context.Context, name string) (*gateways.Gateway, error) {
	g, err := o.cfg.Store.Stored(name)
	if err != nil {
		return nil, err
	}
	if c := o.providerCluster(g); c != nil {
		if _, err := o.cfg.Providers.Get(ctx, c); err != nil {
			return nil, apierrors.NewServiceUnavailable(fmt.Sprintf(
				"ClusterGateway %q: the request ended while its credential provider %q ran: %v", name, c.Provider, err))
		}
		// The provider may have run a while: the gateway as stored now.
		return o.cfg.Store.Stored(name)
	}
	return g, nil
}

// Unauthorized tells a Provider gateway's provider that its cluster
// refused token, or g's client certificate when token is empty; client-go
// runs it again unless it was replaced already.
func (o *Owner) Unauthorized(ctx context.Context, g *gateways.Gateway, token string) {
	if c := o.providerCluster(g); c != nil {
		o.cfg.Providers.Unauthorized(ctx, c, token, g.Conn.Cert)
	}
}
