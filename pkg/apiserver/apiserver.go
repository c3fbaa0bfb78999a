// Package apiserver assembles the gateway: the generic API server, the
// ClusterGateway storage over Secrets, the proxy, its pool and tunnels.
package apiserver

import (
	"context"
	"fmt"
	"net/http"

	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/pool"
	"github.com/clustergateway/cluster-gateway/pkg/pool/konnectivity"
	"github.com/clustergateway/cluster-gateway/pkg/proxy"
	"github.com/clustergateway/cluster-gateway/pkg/registry/clustergateway"
)

// ExtraConfig is what the gateway adds to the generic server's configuration.
type ExtraConfig struct {
	// SecretNamespace is the hub namespace whose labelled Secrets are the gateways.
	SecretNamespace string
	// Pool bounds and times the pooled transports.
	Pool pool.Options
	// AuthorizeProxySubpath also authorizes the inner request of every proxied call.
	AuthorizeProxySubpath bool
	// Konnectivity, when set, reaches Konnectivity endpoints through this proxy-server.
	Konnectivity *konnectivity.Options
}

// Config is the whole configuration.
type Config struct {
	Generic *genericapiserver.RecommendedConfig
	Extra   ExtraConfig
}

// Server is a running gateway.
type Server struct {
	Generic *genericapiserver.GenericAPIServer
	Cache   *clustergateway.Cache
	Pool    *pool.Pool
	Tunnel  *konnectivity.Manager
}

// New builds the server; nothing runs until Run.
func (c *Config) New() (*Server, error) {
	if c.Generic.ClientConfig == nil {
		return nil, fmt.Errorf("no hub client configuration: pass --kubeconfig or run in a cluster")
	}
	completed := c.Generic.Complete()
	generic, err := completed.New("cluster-gateway", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(c.Generic.ClientConfig)
	if err != nil {
		return nil, fmt.Errorf("building the hub client: %w", err)
	}
	s := &Server{
		Generic: generic,
		Cache:   clustergateway.NewCache(client, c.Extra.SecretNamespace),
		Pool:    pool.New(c.Extra.Pool),
	}
	pool.Register()
	popts := proxy.Options{
		Cache:            s.Cache,
		Pool:             s.Pool,
		DialTimeout:      c.Extra.Pool.DialTimeout,
		Authorizer:       c.Generic.Authorization.Authorizer,
		AuthorizeSubpath: c.Extra.AuthorizeProxySubpath,
	}
	if k := c.Extra.Konnectivity; k != nil {
		if s.Tunnel, err = konnectivity.New(*k); err != nil {
			s.Pool.Close()
			return nil, fmt.Errorf("konnectivity: %w", err)
		}
		popts.Tunnel = s.Tunnel
	}
	px := proxy.New(popts)
	if err := s.Cache.OnDelete(px.Forget); err != nil {
		s.stop()
		return nil, err
	}

	group := genericapiserver.NewDefaultAPIGroupInfo(v1alpha1.GroupName, Scheme, ParameterCodec, Codecs)
	group.VersionedResourcesStorageMap[v1alpha1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"clustergateways":        clustergateway.NewREST(s.Cache, c.Extra.Pool.Endpoints),
		"clustergateways/proxy":  clustergateway.NewProxyREST(px),
		"clustergateways/health": clustergateway.NewHealthREST(px),
	}
	if err := generic.InstallAPIGroup(&group); err != nil {
		s.stop()
		return nil, err
	}

	// Not ready, so the aggregator sends nothing here, until the cache is filled.
	if err := generic.AddReadyzChecks(healthz.NamedCheck("clustergateway-cache", func(*http.Request) error {
		if !s.Cache.HasSynced() {
			return fmt.Errorf("the ClusterGateway cache has not synced with the hub's Secrets in namespace %s yet", s.Cache.Namespace())
		}
		return nil
	})); err != nil {
		s.stop()
		return nil, err
	}
	if err := generic.AddPostStartHook("start-clustergateway-cache", func(ctx genericapiserver.PostStartHookContext) error {
		go s.Cache.Run(ctx)
		if s.Tunnel != nil {
			s.Tunnel.Start(ctx)
		}
		return nil
	}); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// Run serves until ctx is done, then drains and stops every transport and tunnel.
func (s *Server) Run(ctx context.Context) error {
	defer s.stop()
	return s.Generic.PrepareRun().RunWithContext(ctx)
}

func (s *Server) stop() {
	s.Pool.Close()
	if s.Tunnel != nil {
		s.Tunnel.Stop()
	}
	klog.InfoS("Stopped the transport pool and tunnels")
}
