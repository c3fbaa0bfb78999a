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
	"os"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/group"
	unionauth "k8s.io/apiserver/pkg/authentication/request/union"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/certauth"
	"github.com/clustergateway/cluster-gateway/pkg/clustermetrics"
	"github.com/clustergateway/cluster-gateway/pkg/clusters"
	"github.com/clustergateway/cluster-gateway/pkg/credentials"
	"github.com/clustergateway/cluster-gateway/pkg/fairness"
	"github.com/clustergateway/cluster-gateway/pkg/fanout"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
	"github.com/clustergateway/cluster-gateway/pkg/health"
	"github.com/clustergateway/cluster-gateway/pkg/inventory"
	"github.com/clustergateway/cluster-gateway/pkg/pool"
	"github.com/clustergateway/cluster-gateway/pkg/pool/konnectivity"
	"github.com/clustergateway/cluster-gateway/pkg/proxy"
	"github.com/clustergateway/cluster-gateway/pkg/publish"
	"github.com/clustergateway/cluster-gateway/pkg/registry/clustergateway"
	gwtracing "github.com/clustergateway/cluster-gateway/pkg/tracing"
)

// ExtraConfig is what the gateway adds to the generic server's configuration.
type ExtraConfig struct {
	// SecretNamespace is the hub namespace whose labelled Secrets are the gateways.
	SecretNamespace string
	// SourceNamespaces are the hub namespaces whose Secrets gateways may name
	// as their credential (SecretNamespace by default).
	SourceNamespaces []string
	// CredentialProviders are the exec plugins gateways of credential type
	// Provider may name (nil: none).
	CredentialProviders *credentials.Config
	// CredentialProvidersReload is where that configuration came from and
	// how often the gateway looks for changes.
	CredentialProvidersReload credentials.ReloadConfig
	// AuthorizeProxySubpath also authorizes the inner request of every proxied call.
	AuthorizeProxySubpath bool
	// Pool bounds and times the pooled transports (its Endpoints policy included).
	Pool pool.Config
	// Konnectivity reaches Konnectivity endpoints through a proxy-server when
	// its Address is set. Its RetireGrace, DialTimeout and Endpoints are the pool's.
	Konnectivity konnectivity.Config
	// Fairness bounds each cluster's proxied requests in flight and queues
	// the rest fairly among callers; the zero value bounds nothing.
	Fairness fairness.Config
	// Inventory syncs ClusterGateways from Cluster API and ClusterProfile
	// inventories in SourceNamespaces, when any is switched on.
	Inventory inventory.Config
	// Publish publishes gateways as a ClusterProfile access provider, under
	// the inventory sync's Lease.
	Publish publish.Config
	// Health probes every cluster (the Reachable condition, fail-fast 503s).
	Health health.Config
	// ClusterMetrics bounds the opt-in per-cluster series; the zero value
	// serves none.
	ClusterMetrics clustermetrics.Config
	// Fanout bounds the reads of a set of clusters (clustersets/<set>/proxy).
	Fanout fanout.Config
	// ShutdownStreamDrain is how long, on shutdown, upgraded streams (exec,
	// attach, port-forward) may go on after proxied watches were ended.
	ShutdownStreamDrain time.Duration
	// CertCacheSize bounds the cache of verified client-certificate chains
	// (pkg/certauth); 0 verifies every request's chain. ClientCA verifies
	// users' client certificates (the hub's client CA): the same provider
	// the generic server was configured with, which its secure serving
	// runs; nil: only the hub's front-proxy certificate is cached.
	CertCacheSize int
	ClientCA      dynamiccertificates.CAContentProvider
	// StockHandlerChain is for the A/B rows of make bench (a hidden
	// flag): the generic server's DefaultBuildHandlerChain wrapped around
	// the proxy route instead of the gateway's copy.
	StockHandlerChain bool
	// StockProxyPath is the other A/B row of make bench (a hidden flag):
	// the whole stock path, DefaultBuildHandlerChain with the proxy
	// subresource served by go-restful's REST connect handler, without
	// proxy.Route and the inner-request memo.
	StockProxyPath bool
	// Tracing is true when --tracing-config-file is set: only then does
	// the handler chain trace requests.
	Tracing bool
	// NoStackGrowth is an A/B row of make bench (a hidden flag): the
	// gateway's chain without withGrownStack.
	NoStackGrowth bool
	// TracingNoExporter is an A/B row of make bench (a hidden flag):
	// everything traced as with Tracing, to a provider that exports
	// nothing.
	TracingNoExporter bool
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
	Prober  *health.Prober
	// Clusters holds each cluster's record: the one follower of the store
	// besides the inventory sync, which the pool, the prober, the
	// providers and the publisher follow.
	Clusters *clusters.Owner
	// Providers run gateways' credential providers; nil without a
	// --credential-providers-file.
	Providers *credentials.Providers
	// Inventory syncs gateways from inventories; nil when off (and the
	// publisher off: its Lease is the publisher's too).
	Inventory *inventory.Controller
	// Publisher publishes gateways to ClusterProfiles; nil when off.
	Publisher *publish.Publisher
	// CertCache verifies client-certificate chains once; nil when off.
	CertCache *certauth.Cache
}

// completedConfig is a Config whose generic part holds the gateway's
// handler chain, authentication and OpenAPI definitions.
type completedConfig struct {
	Generic   genericapiserver.CompletedConfig
	Extra     *ExtraConfig
	hub       *restclient.Config // the hub, where the gateways' Secrets are
	route     *proxy.Route       // in the handler chain; serves once New has built the proxy
	certCache *certauth.Cache    // in the authenticator; nil when off
}

// CompletedConfig is a Config after Complete; only it can build a Server.
type CompletedConfig struct{ *completedConfig }

// Complete sets what the gateway needs in the generic configuration: the
// handler chain (handlerchain.go: proxied watches, logs -f, exec and
// port-forward stream past the request timeout, and proxy.Route passes
// dryRun to the cluster, which the REST connect handler would refuse), the
// certificate cache in front of the authenticator, and the OpenAPI
// definitions.
func (c *Config) Complete() (CompletedConfig, error) {
	g := c.Generic
	if g.ClientConfig == nil {
		return CompletedConfig{}, errors.New("no hub client configuration: pass --kubeconfig or run in a cluster")
	}
	g.LongRunningFunc = fanout.IsLongRunning(proxy.IsLongRunning, proxy.IsSetProxy)
	route := new(proxy.Route)
	stock, stockPath, tracing := c.Extra.StockHandlerChain, c.Extra.StockProxyPath, c.Extra.Tracing || c.Extra.TracingNoExporter
	noStackGrowth := c.Extra.NoStackGrowth
	if c.Extra.TracingNoExporter {
		g.TracerProvider = gwtracing.NoExporter()
	}
	g.BuildHandlerChainFunc = func(h http.Handler, gc *genericapiserver.Config) http.Handler {
		if stockPath {
			// IsLongRunning stays: the stock timeout and in-flight filters
			// need it so that watches, logs -f and exec are not cut.
			return genericapiserver.DefaultBuildHandlerChain(h, gc)
		}
		if stock {
			return withInnerMemo(genericapiserver.DefaultBuildHandlerChain(route.Handler(h), gc))
		}
		return buildHandlerChain(h, gc, tracing, !noStackGrowth, route)
	}
	namer := openapinamer.NewDefinitionNamer(Scheme)
	g.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(v1alpha1.GetOpenAPIDefinitions, namer)
	g.OpenAPIConfig.Info.Title = "Cluster Gateway"
	g.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(v1alpha1.GetOpenAPIDefinitions, namer)
	g.OpenAPIV3Config.Info.Title = "Cluster Gateway"
	certCache, err := c.cacheCertificateAuthentication()
	if err != nil {
		return CompletedConfig{}, err
	}
	return CompletedConfig{&completedConfig{Generic: g.Complete(), Extra: &c.Extra, hub: g.ClientConfig, route: route, certCache: certCache}}, nil
}

// New builds the server from the completed configuration, which it leaves
// as it is; nothing runs until Run.
func (c CompletedConfig) New() (*Server, error) {
	g := c.Generic
	generic, err := g.New("cluster-gateway", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(c.hub)
	if err != nil {
		return nil, fmt.Errorf("building the hub client: %w", err)
	}
	s := &Server{Generic: generic, Store: gateways.NewStore(client, c.Extra.SecretNamespace, c.Extra.SourceNamespaces...), CertCache: c.certCache}
	if c.Extra.CredentialProviders != nil {
		providers, err := credentials.New(c.Extra.CredentialProviders)
		if err != nil {
			return nil, err
		}
		s.Providers = providers // the clusters' records run them (clusters.Config.Providers)
	}
	// The gateway's own spans go where the generic server's do.
	var tracer *gwtracing.Tracer
	if c.Extra.Tracing || c.Extra.TracingNoExporter {
		tracer = gwtracing.New(g.TracerProvider)
	}
	if s.Providers != nil {
		s.Providers.Trace(tracer)
	}
	popt := c.Extra.Pool
	popt.Tracer = tracer
	if s.Pool, err = pool.New(popt); err != nil {
		if s.Providers != nil {
			_ = s.Providers.Close()
		}
		return nil, err
	}
	if s.Limiter, err = fairness.New(c.Extra.Fairness); err != nil {
		s.stop()
		return nil, err
	}
	popts := proxy.Config{
		Pool:                  s.Pool,
		DialTimeout:           c.Extra.Pool.DialTimeout,
		ResponseHeaderTimeout: c.Extra.Pool.ResponseHeaderTimeout,
		Authorizer:            g.Authorization.Authorizer,
		AuthorizeSubpath:      c.Extra.AuthorizeProxySubpath,
		Limiter:               s.Limiter,
		MaxBodyBytes:          g.MaxRequestBodyBytes,
		Tracer:                tracer,
	}
	copts := clusters.Config{Store: s.Store, Pool: s.Pool, Limiter: s.Limiter}
	if s.Providers != nil {
		copts.Providers = s.Providers
	}
	if k := c.Extra.Konnectivity; k.Enabled() {
		k.RetireGrace, k.DialTimeout, k.Endpoints = c.Extra.Pool.RetireGrace, c.Extra.Pool.DialTimeout, c.Extra.Pool.Endpoints
		if s.Tunnel, err = konnectivity.New(k); err != nil {
			s.stop()
			return nil, err
		}
		copts.Tunnel = s.Tunnel
		s.Tunnel.OnMissedCheck(func(string) { s.Pool.RenewTunnelled() })
	}
	if s.Clusters, err = clusters.New(copts); err != nil {
		s.stop()
		return nil, err
	}
	// The prober is built over the records, which hold each cluster's
	// probe state and tell it of each step; it probes through the proxy's
	// own path (ProbeCluster), and the proxy reads what it knows. It runs
	// from the post-start hook, after px is set.
	var px *proxy.Proxy
	if s.Prober, err = health.New(c.Extra.Health, s.Clusters, func(ctx context.Context, name string) health.Outcome {
		return px.ProbeCluster(ctx, name)
	}); err != nil {
		s.stop()
		return nil, err
	}
	popts.Clusters, popts.Health = s.Clusters, s.Prober
	if px, err = proxy.New(popts); err != nil {
		s.stop()
		return nil, err
	}
	if c.Extra.Inventory.Enabled() || c.Extra.Publish.Enabled {
		if s.Inventory, s.Publisher, err = newInventory(c.hub, client, s.Store, s.Clusters, s.Prober, c.Extra); err != nil {
			s.stop()
			return nil, err
		}
	}
	proxyREST := clustergateway.NewProxyREST(px)
	c.route.Serve(px, proxyREST.ConnectMethods()) // the route serves what the REST would
	sets, err := fanout.New(fanout.Params{Gateways: fanout.StoreGateways(s.Store), Authorizer: popts.Authorizer, Serve: px.Serve, Config: c.Extra.Fanout})
	if err != nil {
		s.stop()
		return nil, err
	}
	c.route.ServeSets(sets)
	if err := s.registerMetrics(c.Extra.Metrics, px, c.Extra.ClusterMetrics); err != nil {
		s.stop()
		return nil, err
	}

	group := genericapiserver.NewDefaultAPIGroupInfo(v1alpha1.GroupName, Scheme, ParameterCodec, Codecs)
	group.VersionedResourcesStorageMap[v1alpha1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"clustergateways":        clustergateway.NewREST(s.Store, c.Extra.Pool.Endpoints, s.Prober, popts.Authorizer),
		"clustergateways/proxy":  proxyREST,
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
	// On shutdown, once the shutdown delay has let load balancers stop sending
	// here (readiness turned false at once), end proxied watches cleanly so
	// clients re-watch elsewhere, and give exec and port-forward a bounded
	// drain. The HTTP server stops only after this hook.
	if err := generic.AddPreShutdownHook("drain-proxied-streams", func() error {
		time.Sleep(generic.ShutdownDelayDuration)
		px.Drain(c.Extra.ShutdownStreamDrain)
		return nil
	}); err != nil {
		s.stop()
		return nil, err
	}
	if err := generic.AddPostStartHook("start-clustergateway-store", func(ctx genericapiserver.PostStartHookContext) error {
		go s.Store.Run(ctx)
		go s.Prober.Run(ctx)
		if s.Inventory != nil {
			go s.Inventory.Run(ctx)
		}
		if s.Publisher != nil {
			go s.Publisher.RunInformers(ctx)
			if p := c.Extra.Publish; p.HubCAFile != "" && p.HubCAReloadInterval > 0 {
				go s.Publisher.WatchHubCA(ctx, p.HubCAReloadInterval)
			}
		}
		if s.Tunnel != nil {
			s.Tunnel.Start(ctx)
		}
		if r := c.Extra.CredentialProvidersReload; s.Providers != nil && r.File != "" && r.Interval > 0 {
			go s.Providers.WatchConfig(ctx, r.File, r.DefaultTimeout, r.Interval)
		}
		return nil
	}); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// registerer is how every component of the gateway gives its metrics: a
// Metrics() whose Register adds them to the server's registry. No
// package-level metrics: each is its component's, registered once here.
type registerer interface{ Register(metrics.KubeRegistry) }

// registerMetrics registers every metric of the gateway once, into r.
func (s *Server) registerMetrics(r metrics.KubeRegistry, px *proxy.Proxy, perCluster clustermetrics.Config) error {
	if r == nil {
		var ok bool
		if r, ok = legacyregistry.DefaultGatherer.(metrics.KubeRegistry); !ok {
			return fmt.Errorf("the generic server's metrics registry is a %T, not a KubeRegistry", legacyregistry.DefaultGatherer)
		}
	}
	all := []registerer{s.Pool.Metrics(), s.Store.Metrics(), px.Metrics(), s.Limiter.Metrics(), s.Prober.Metrics()}
	if s.Providers != nil {
		all = append(all, s.Providers.Metrics())
	}
	if s.CertCache != nil {
		all = append(all, s.CertCache.Metrics())
	}
	all = append(all, clustermetrics.New(perCluster, clustermetrics.FromStore(s.Store, s.Prober)))
	if s.Inventory != nil {
		all = append(all, s.Inventory.Metrics())
	}
	if s.Tunnel != nil {
		all = append(all, s.Tunnel.Metrics())
	}
	if s.Publisher != nil {
		all = append(all, s.Publisher.Metrics())
	}
	for _, m := range all {
		m.Register(r)
	}
	return nil
}

// newInventory builds the inventory sync over the store, reading the
// namespaces whose Secrets the gateway reads, and the ClusterProfile
// publisher, which runs under the sync's Lease (with no inventory synced,
// the sync only holds the Lease for it).
func newInventory(hub *restclient.Config, client kubernetes.Interface, store *gateways.Store, records *clusters.Owner, prober *health.Prober, extra *ExtraConfig) (*inventory.Controller, *publish.Publisher, error) {
	cfg := inventory.Params{Config: extra.Inventory, Store: store, Client: client, Namespaces: extra.SourceNamespaces}
	if len(cfg.Namespaces) == 0 {
		cfg.Namespaces = []string{extra.SecretNamespace}
	}
	if cfg.Syncs(inventory.SourceClusterProfile) || extra.Publish.Enabled {
		var err error
		if cfg.Dynamic, err = dynamic.NewForConfig(hub); err != nil {
			return nil, nil, fmt.Errorf("building the hub's dynamic client for ClusterProfiles: %w", err)
		}
	}
	var pub *publish.Publisher
	if extra.Publish.Enabled {
		pc := publish.Params{Config: extra.Publish, Store: store, Clusters: records, Prober: prober, Client: client, Dynamic: cfg.Dynamic}
		if cfg.Syncs(inventory.SourceClusterProfile) {
			pc.SyncNamespaces = cfg.Namespaces
		}
		var err error
		if pub, err = publish.New(pc); err != nil {
			return nil, nil, err
		}
		cfg.Skip = pub.Owns
		cfg.Tasks = append(cfg.Tasks, pub)
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, nil, fmt.Errorf("naming this replica in the inventory sync's Lease: %w", err)
	}
	cfg.Identity = host + "_" + string(uuid.NewUUID())
	ctrl, err := inventory.New(cfg)
	return ctrl, pub, err
}

// Run serves until ctx is done, then drains and stops every transport and tunnel.
func (s *Server) Run(ctx context.Context) error {
	defer s.stop()
	return s.Generic.PrepareRun().RunWithContext(ctx)
}

func (s *Server) stop() {
	s.Pool.Close()
	if s.Providers != nil {
		_ = s.Providers.Close() // and their private directory
	}
	if s.Tunnel != nil {
		s.Tunnel.Stop()
	}
	klog.InfoS("Stopped the transport pool and tunnels")
}

// cacheCertificateAuthentication puts authenticators that verify each client
// certificate chain once (pkg/certauth) in front of the generic server's
// delegated authenticator: the hub's front-proxy certificate (every request
// through the hub) and users' own certificates. Bearer tokens, and whatever
// the cached ones cannot authenticate, go on to the generic authenticator
// as before.
func (c *Config) cacheCertificateAuthentication() (*certauth.Cache, error) {
	a := &c.Generic.Authentication
	if c.Extra.CertCacheSize <= 0 || a.Authenticator == nil {
		return nil, nil
	}
	cache, err := certauth.NewCache(c.Extra.CertCacheSize)
	if err != nil {
		return nil, err
	}
	var cached []authenticator.Request
	if rh := a.RequestHeaderConfig; rh != nil {
		cached = append(cached, cache.RequestHeader(certauth.RequestHeaderConfig{
			CAContentProvider: rh.CAContentProvider, AllowedClientNames: rh.AllowedClientNames,
			UsernameHeaders: rh.UsernameHeaders, UIDHeaders: rh.UIDHeaders, GroupHeaders: rh.GroupHeaders, ExtraHeaderPrefixes: rh.ExtraHeaderPrefixes,
		}))
	}
	if c.Extra.ClientCA != nil {
		cached = append(cached, cache.ClientCert(c.Extra.ClientCA))
	}
	if len(cached) == 0 {
		return nil, nil
	}
	a.Authenticator = unionauth.New(group.NewAuthenticatedGroupAdder(unionauth.New(cached...)), a.Authenticator)
	return cache, nil
}
