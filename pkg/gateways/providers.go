package gateways

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/credentials"
)

// providerWatch is what the store keeps to follow credential providers:
// the OnChange functions to call when a provider's credential changes.
type providerWatch struct {
	mu  sync.Mutex
	fns []func(old, new *Gateway)
}

// SetProviders has gateways of credential type Provider take their
// credential from p: a new credential or a failure is a change (OnChange).
// A deleted gateway's provider state is released by its record's owner
// (pkg/clusters). Call it before OnChange and Run.
func (s *Store) SetProviders(p *credentials.Providers) error {
	s.providers = p
	p.OnChange(s.providerChanged)
	return nil
}

func (s *Store) onProviderChange(fn func(old, new *Gateway)) {
	s.provWatch.mu.Lock()
	s.provWatch.fns = append(s.provWatch.fns, fn)
	s.provWatch.mu.Unlock()
}

// providerChanged tells the OnChange functions about a gateway whose
// provider returned a new credential or failed.
func (s *Store) providerChanged(name string) {
	obj, ok, _ := s.informer.GetIndexer().GetByKey(s.namespace + "/" + name)
	if !ok {
		return
	}
	g := obj.(*Gateway)
	now := s.clock.Now()
	old := g.at(now)
	if r := g.resolved.Load(); r != nil {
		old = r.gw.at(now)
	}
	n := s.resolve(g, now)
	if n == old {
		return
	}
	s.provWatch.mu.Lock()
	fns := s.provWatch.fns
	s.provWatch.mu.Unlock()
	for _, fn := range fns {
		fn(old, n)
	}
}

// GetForRequest is Get for a proxied request: a gateway whose credential comes from a
// provider has it from the provider now (which runs it when client-go has
// none, or it is about to expire), within the provider's timeout or until
// ctx ends.
func (s *Store) GetForRequest(ctx context.Context, name string) (*Gateway, error) {
	obj, ok, err := s.informer.GetIndexer().GetByKey(s.namespace + "/" + name)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, apierrors.NewNotFound(Resource, name)
	}
	g := obj.(*Gateway)
	if c := s.providerCluster(g); c != nil {
		if _, err := s.providers.Get(ctx, c); err != nil {
			return nil, apierrors.NewServiceUnavailable(fmt.Sprintf(
				"ClusterGateway %q: the request ended while its credential provider %q ran: %v", name, c.Provider, err))
		}
	}
	return s.resolve(g, s.clock.Now()), nil
}

// Unauthorized tells a Provider gateway's provider that its cluster
// refused token, or g's client certificate when token is empty; client-go
// runs it again unless it was replaced already.
func (s *Store) Unauthorized(ctx context.Context, g *Gateway, token string) {
	if c := s.providerCluster(g); c != nil {
		s.providers.Unauthorized(ctx, c, token, g.Conn.Cert)
	}
}

// providerCluster is what g gives its provider; nil unless g's credential
// comes from a configured provider.
func (s *Store) providerCluster(g *Gateway) *credentials.Cluster {
	cred := g.Object.Spec.Credential
	if cred.Type != v1alpha1.CredentialProvider || cred.Provider == nil || s.providers == nil {
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

// resolveProvider is g with its provider's latest credential.
func (s *Store) resolveProvider(g *Gateway, c *credentials.Cluster, now time.Time) *Gateway {
	st := s.providers.Latest(c)
	prev := g.resolved.Load()
	if prev != nil && prev.prov == st {
		return prev.gw.at(now)
	}
	obj := *g.Object // the same gateway but for its status
	r := &resolvedGateway{prov: st, gw: withStatus(g.stored, &obj, fromProvider(&obj, st), now)}
	switch {
	case st == nil:
	case st.Problem != "":
		s.metrics.SourceFailed(SourceKindProvider, v1alpha1.ReasonProviderFailed)
	case prev != nil && prev.prov != nil && prev.prov.Problem == "" && prev.prov.Rotated.Before(st.Rotated):
		s.metrics.Rotated(SourceKindProvider)
	}
	g.resolved.Store(r)
	return r.gw.at(now)
}

// fromProvider is obj's connection with its provider's credential st (nil:
// the provider has not run yet for this version; a request runs it).
func fromProvider(obj *v1alpha1.ClusterGateway, st *credentials.State) resolution {
	r := resolution{conn: Conn{Endpoint: obj.Spec.Endpoint}, source: "Provider " + obj.Spec.Credential.Provider.Name}
	if st == nil {
		return r
	}
	r.rotated = metav1.NewTime(st.Rotated)
	if st.Problem != "" {
		r.reason, r.message = v1alpha1.ReasonProviderFailed, st.Problem
		return r
	}
	r.conn.Token, r.conn.Cert, r.conn.Key = st.Token, st.Cert, st.Key
	r.tokenExpiry = jwtExpiry(st.Token)
	r.expires = st.Expires // the certificate's notAfter when the ExecCredential said nothing: the same
	return r
}
