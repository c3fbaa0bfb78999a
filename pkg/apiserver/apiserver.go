// Package apiserver assembles the gateway: the generic API server with the
// gateway's handler-chain hooks, the gateway store, the API over it, the
// proxy, its transport pool and konnectivity tunnel, and their metrics. It is
// the one place that wires them; cmd/ only parses flags into a Config.
package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/fairness"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
	"github.com/clustergateway/cluster-gateway/pkg/pool"
	"github.com/clustergateway/cluster-gateway/pkg/pool/konnectivity"
	"github.com/clustergateway/cluster-gateway/pkg/proxy"
	"github.com/clustergateway/cluster-gateway/pkg/registry/clustergateway"
)

// ExtraConfig is what the gateway adds to the generic server's configuration.
type ExtraConfig struct {
	// SecretNamespace is the hub namespace whose labelled Secrets are the gateways.
	SecretNamespace string
	// AuthorizeProxySubpath also authorizes the inner request of every proxied call.
	AuthorizeProxySubpath bool
	// Pool bounds and times the pooled transports (its Endpoints policy included).
	Pool pool.Options
	// Konnectivity reaches Konnectivity endpoints through a proxy-server when
	// its Address is set. Its RetireGrace and DialTimeout are the pool's.
	Konnectivity konnectivity.Options
	// Fairness bounds each cluster's proxied requests in flight and queues
	// the rest fairly among callers; the zero value bounds nothing.
	Fairness fairness.Options
	// Metrics is where the gateway's metrics are registered; nil: the
	// registry the generic server serves on /metrics.
	Metrics metrics.KubeRegistry
}

// Config is the whole configuration.
type Config struct {
	Generic *genericapiserver.RecommendedConfig
	Extra   ExtraConfig
}

// NewConfig returns a configuration for the options to be applied to.
func NewConfig() *Config {
	return &Config{Generic: genericapiserver.NewRecommendedConfig(Codecs)}
}

// Server is a running gateway.
type Server struct {
	Generic *genericapiserver.GenericAPIServer
	Store   *gateways.Store
	Pool    *pool.Pool
	Tunnel  *konnectivity.Manager // nil without a proxy-server
	Limiter *fairness.Limiter
}

// New builds the server; nothing runs until Run.
func (c *Config) New() (*Server, error) {
	g := c.Generic
	if g.ClientConfig == nil {
		return nil, errors.New("no hub client configuration: pass --kubeconfig or run in a cluster")
	}
	// The gateway's part of the handler chain: proxied watches, logs -f,
	// exec and port-forward stream past the request timeout (everything
	// else keeps it and the in-flight limit), and dryRun is passed to the
	// cluster rather than refused on a connect subresource.
	g.LongRunningFunc = proxy.IsLongRunning
	g.BuildHandlerChainFunc = func(h http.Handler, c *genericapiserver.Config) http.Handler {
		return genericapiserver.DefaultBuildHandlerChain(proxy.WithDryRunPassthrough(h), c)
	}
	namer := openapinamer.NewDefinitionNamer(Scheme)
	g.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(v1alpha1.GetOpenAPIDefinitions, namer)
	g.OpenAPIConfig.Info.Title = "Cluster Gateway"
	g.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(v1alpha1.GetOpenAPIDefinitions, namer)
	g.OpenAPIV3Config.Info.Title = "Cluster Gateway"

	generic, err := g.Complete().New("cluster-gateway", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(g.ClientConfig)
	if err != nil {
		return nil, fmt.Errorf("building the hub client: %w", err)
	}
	s := &Server{Generic: generic, Store: gateways.NewStore(client, c.Extra.SecretNamespace)}
	if s.Pool, err = pool.New(c.Extra.Pool); err != nil {
		return nil, err
	}
	if s.Limiter, err = fairness.New(c.Extra.Fairness); err != nil {
		s.stop()
		return nil, err
	}
	popts := proxy.Options{
		Store:            s.Store,
		Pool:             s.Pool,
		DialTimeout:      c.Extra.Pool.DialTimeout,
		Authorizer:       g.Authorization.Authorizer,
		AuthorizeSubpath: c.Extra.AuthorizeProxySubpath,
		Limiter:          s.Limiter,
	}
	if k := c.Extra.Konnectivity; k.Enabled() {
		k.RetireGrace, k.DialTimeout = c.Extra.Pool.RetireGrace, c.Extra.Pool.DialTimeout
		if s.Tunnel, err = konnectivity.New(k); err != nil {
			s.stop()
			return nil, err
		}
		popts.Tunnel = s.Tunnel
	}
	px, err := proxy.New(popts)
	if err != nil {
		s.stop()
		return nil, err
	}
	if err := s.registerMetrics(c.Extra.Metrics, px); err != nil {
		s.stop()
		return nil, err
	}

	group := genericapiserver.NewDefaultAPIGroupInfo(v1alpha1.GroupName, Scheme, ParameterCodec, Codecs)
	group.VersionedResourcesStorageMap[v1alpha1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"clustergateways":        clustergateway.NewREST(s.Store, c.Extra.Pool.Endpoints),
		"clustergateways/proxy":  clustergateway.NewProxyREST(px),
		"clustergateways/health": clustergateway.NewHealthREST(px),
	}
	if err := generic.InstallAPIGroup(&group); err != nil {
		s.stop()
		return nil, err
	}

	// Not ready, so the aggregator sends nothing here, until the store is filled.
	if err := generic.AddReadyzChecks(healthz.NamedCheck("clustergateway-store", func(*http.Request) error {
		if !s.Store.HasSynced() {
			return fmt.Errorf("the ClusterGateway store has not synced with the hub's Secrets in namespace %s yet", s.Store.Namespace())
		}
		return nil
	})); err != nil {
		s.stop()
		return nil, err
	}
	if err := generic.AddPostStartHook("start-clustergateway-store", func(ctx genericapiserver.PostStartHookContext) error {
		go s.Store.Run(ctx)
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

// registerMetrics registers every metric of the gateway once, into r.
func (s *Server) registerMetrics(r metrics.KubeRegistry, px *proxy.Proxy) error {
	if r == nil {
		var ok bool
		if r, ok = legacyregistry.DefaultGatherer.(metrics.KubeRegistry); !ok {
			return fmt.Errorf("the generic server's metrics registry is a %T, not a KubeRegistry", legacyregistry.DefaultGatherer)
		}
	}
	r.CustomMustRegister(s.Pool.Collector())
	px.Metrics().Register(r)
	s.Limiter.Metrics().Register(r)
	if s.Tunnel != nil {
		s.Tunnel.Metrics().Register(r)
	}
	return nil
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
