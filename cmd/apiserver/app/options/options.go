// Package options holds every flag of the gateway: the generic API
// server's and each component's own (pool, konnectivity, endpoint policy,
// per-cluster limits, health, inventory sync), which fill the plain config
// types of the pkg/ packages; no pkg/ package defines a flag. As in
// k8s.io/sample-apiserver: NewOptions, Flags, then Complete (load the files
// the flags name, default what depends on other flags), Validate (check
// everything in one pass, change nothing), and ServerConfig.
package options

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/apiserver"
	"github.com/clustergateway/cluster-gateway/pkg/clustermetrics"
	"github.com/clustergateway/cluster-gateway/pkg/credentials"
	"github.com/clustergateway/cluster-gateway/pkg/endpointpolicy"
	"github.com/clustergateway/cluster-gateway/pkg/fairness"
	"github.com/clustergateway/cluster-gateway/pkg/fanout"
	"github.com/clustergateway/cluster-gateway/pkg/health"
	"github.com/clustergateway/cluster-gateway/pkg/inventory"
	"github.com/clustergateway/cluster-gateway/pkg/pool"
	"github.com/clustergateway/cluster-gateway/pkg/pool/konnectivity"
	"github.com/clustergateway/cluster-gateway/pkg/publish"
)

// Options are the gateway's flags.
type Options struct {
	Recommended *genericoptions.RecommendedOptions
	ServerRun   *genericoptions.ServerRunOptions
	Logs        *logsapi.LoggingConfiguration

	SecretNamespace  string
	SourceNamespaces []string
	// CredentialProvidersFile names the exec plugins gateways may use
	// (read and checked by Complete into credentialProviders).
	CredentialProvidersFile   string
	CredentialProviderTimeout time.Duration
	// CredentialProvidersReloadInterval: how often the file is looked at for changes (0: never).
	CredentialProvidersReloadInterval time.Duration
	credentialProviders               *credentials.Config
	AuthorizeProxySubpath             bool
	ShutdownStreamDrain               time.Duration
	CertCacheSize                     int
	// A/B switches for make bench (hidden).
	StockHandlerChain, StockProxyPath bool
	TracingNoExporter                 bool
	NoStackGrowth                     bool

	Pool         *pool.Config
	Konnectivity *konnectivity.Config
	Endpoints    *endpointpolicy.Config
	Fairness     *fairness.Config
	Health       *health.Config
	Inventory    *inventory.Config
	// ClusterMetrics are the opt-in per-cluster series (clustermetrics.go).
	ClusterMetrics clustermetrics.Config
	Publish        *publish.Config
	Fanout         fanout.Config
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	rec := genericoptions.NewRecommendedOptions("", apiserver.Codecs.LegacyCodec(v1alpha1.SchemeGroupVersion))
	rec.Etcd = nil      // gateways are Secrets on the hub: no storage of our own
	rec.Admission = nil // nothing to admit beyond validation; avoids watching the hub's webhooks
	// Priority and fairness would watch the hub's flow-control objects; the
	// max-in-flight limits apply instead.
	rec.Features.EnablePriorityAndFairness = false
	rec.SecureServing.BindPort = 8443
	return &Options{
		Recommended:         rec,
		ServerRun:           genericoptions.NewServerRunOptions(),
		Logs:                logsapi.NewLoggingConfiguration(),
		SecretNamespace:     "cluster-gateway-system",
		ShutdownStreamDrain: 20 * time.Second,
		// The flag's default, set here so that options built without
		// flags (tests, docgen) hold it too.
		CredentialProviderTimeout:         credentials.DefaultTimeout,
		CertCacheSize:                     4096,
		CredentialProvidersReloadInterval: 10 * time.Second,
		Pool:                              pool.DefaultConfig(),
		Konnectivity:                      konnectivity.DefaultConfig(),
		Endpoints:                         endpointpolicy.DefaultConfig(),
		Health:                            health.DefaultConfig(),
		Fairness:                          fairness.DefaultConfig(),
		Inventory:                         inventory.DefaultConfig(),
		Publish:                           publish.DefaultConfig(),
		Fanout:                            fanout.DefaultConfig(),
	}
}

// Flags groups the flags for help output.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	o.Recommended.AddFlags(fss.FlagSet("generic"))
	o.ServerRun.AddUniversalFlags(fss.FlagSet("server"))
	logsapi.AddFlags(o.Logs, fss.FlagSet("logs"))

	fs := fss.FlagSet("gateway")
	fs.StringVar(&o.SecretNamespace, "secret-namespace", o.SecretNamespace, "Hub namespace whose Secrets labelled gateway.clustergateway.io/cluster-gateway=true are the ClusterGateways.")
	fs.StringSliceVar(&o.SourceNamespaces, "credential-source-namespaces", o.SourceNamespaces, "Hub namespaces whose Secrets ClusterGateways may name as their credential (spec.credential.secretRef), besides --secret-namespace, which is always one. The gateway watches the Secrets of each (it needs get, list and watch on Secrets there); a writer who names one needs get on that Secret.")
	fs.StringVar(&o.CredentialProvidersFile, "credential-providers-file", o.CredentialProvidersFile, "A CredentialProviderConfig (gateway.clustergateway.io/v1alpha1) naming the exec credential plugins that ClusterGateways of credential type Provider may use: each a name, an exec section as in a kubeconfig (absolute command, args, env, apiVersion) and an optional timeout. A SIG-Multicluster provider file (providers: [{name, execConfig}], as read with --clusterprofile-provider-file by Argo CD, MultiKueue and multicluster-runtime) is accepted too, so one file serves them all. A provider runs with only its exec.env as its environment; its output is never logged. See docs/install.md.")
	fs.DurationVar(&o.CredentialProviderTimeout, "credential-provider-timeout", o.CredentialProviderTimeout, "How long a credential provider may run before it is killed, unless its entry in --credential-providers-file sets a timeout.")
	fs.DurationVar(&o.CredentialProvidersReloadInterval, "credential-providers-reload-interval", o.CredentialProvidersReloadInterval, "How often the gateway reads --credential-providers-file for changes; 0 never. A changed file is reloaded without a restart: gateways whose provider changed use the new one from their next request, others and open streams are untouched; a file that is not valid keeps the last good configuration (logged, and counted in cluster_gateway_credential_providers_file_reloads_total{result=\"failure\"}).")
	fs.BoolVar(&o.AuthorizeProxySubpath, "authorize-proxy-subpath", o.AuthorizeProxySubpath, "Also authorize each proxied request's inner verb, resource, namespace and name (or non-resource path) against the hub for the caller.")
	fs.DurationVar(&o.ShutdownStreamDrain, "shutdown-stream-drain", o.ShutdownStreamDrain, "On shutdown, after --shutdown-delay-duration, proxied watches end cleanly (clients re-watch elsewhere) and exec, attach and port-forward streams get this long to end before they are cut. terminationGracePeriodSeconds must cover the delay, this drain and --request-timeout.")
	fs.IntVar(&o.CertCacheSize, "authentication-certificate-cache-size", o.CertCacheSize, "Verified client-certificate chains (the hub's front-proxy certificate, users' own) kept so a connection's certificate is verified once, not per request; 0 verifies every request. An entry ends at its chain's expiry, and a changed CA bundle is used at once.")
	fs.BoolVar(&o.StockHandlerChain, "ab-stock-handler-chain", false, "Measurement only: the generic server's handler chain instead of the gateway's.")
	_ = fs.MarkHidden("ab-stock-handler-chain")
	fs.BoolVar(&o.StockProxyPath, "ab-stock-proxy-path", false, "Measurement only: the generic server's handler chain, and the proxy subresource served by its REST handler (no route, no inner-request memo).")
	_ = fs.MarkHidden("ab-stock-proxy-path")
	fs.BoolVar(&o.TracingNoExporter, "ab-tracing-no-exporter", false, "Measurement only: trace every request as --tracing-config-file would, to a tracer that exports nothing.")
	_ = fs.MarkHidden("ab-tracing-no-exporter")
	fs.BoolVar(&o.NoStackGrowth, "ab-no-stack-growth", false, "Measurement only: the gateway's handler chain without growing each request's stack up front.")
	_ = fs.MarkHidden("ab-no-stack-growth")
	addEndpointFlags(o.Endpoints, fs)
	addPoolFlags(o.Pool, fss.FlagSet("pool"))
	addKonnectivityFlags(o.Konnectivity, fss.FlagSet("konnectivity"))
	addFairnessFlags(o.Fairness, fss.FlagSet("per-cluster limits"))
	addHealthFlags(o.Health, fss.FlagSet("health"))
	addInventoryFlags(o.Inventory, fss.FlagSet("inventory sync"))
	o.addClusterMetricsFlags(fss.FlagSet("metrics"))
	addPublishFlags(o.Publish, fss.FlagSet("clusterprofile publisher"))
	addFanoutFlags(&o.Fanout, fss.FlagSet("sets of clusters"))
	return fss
}

// Complete loads what the flags name and fills the defaults that depend on
// other flags: a self-signed serving certificate when none is given, the
// providers of --credential-providers-file (read and checked, since a file
// that does not parse has nothing to fill in), and
// --inventory-sync-providers, which defaults to every one of them. Call
// it once, before Validate; it returns the file's problems, all of them.
func (o *Options) Complete() error {
	// Without --tls-cert-file, a self-signed serving certificate (as
	// k8s.io/sample-apiserver does).
	if err := o.Recommended.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil, []net.IP{net.ParseIP("127.0.0.1")}); err != nil {
		return fmt.Errorf("creating self-signed certificates: %w", err)
	}
	o.credentialProviders = nil
	if o.CredentialProvidersFile != "" && o.CredentialProviderTimeout > 0 { // Validate refuses a bad timeout
		cfg, err := credentials.LoadConfig(o.CredentialProvidersFile, o.CredentialProviderTimeout)
		if err != nil {
			return err
		}
		o.credentialProviders = cfg
	}
	o.Inventory.DefaultProviders(o.credentialProviders.Names())
	if o.Publish.Enabled {
		o.Inventory.ExcludeFromDefault(o.Publish.ProviderName)
	}
	return nil
}

// Validate checks every flag, as Complete left them, and reports all
// problems at once. It changes nothing.
func (o *Options) Validate() error {
	var errs []error
	errs = append(errs, o.Recommended.Validate()...)
	errs = append(errs, o.ServerRun.Validate()...)
	if o.SecretNamespace == "" {
		errs = append(errs, errors.New("--secret-namespace must not be empty"))
	}
	for _, ns := range o.SourceNamespaces {
		if msgs := apivalidation.ValidateNamespaceName(ns, false); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--credential-source-namespaces: %q is not a namespace name: %s", ns, strings.Join(msgs, "; ")))
		}
	}
	if o.CredentialProviderTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--credential-provider-timeout must be positive, not %v", o.CredentialProviderTimeout))
	}
	switch {
	case o.CredentialProvidersFile != "" && o.credentialProviders == nil:
		// Complete did not load it (a bad timeout, reported above, or
		// Complete not called): there are no names to check against.
		if o.CredentialProviderTimeout > 0 {
			errs = append(errs, errors.New("--credential-providers-file was not loaded: call Complete before Validate"))
		}
	default:
		errs = append(errs, o.Inventory.ValidateProviders(o.credentialProviders.Names())...)
	}
	if o.Publish.Enabled {
		errs = append(errs, o.Inventory.ValidateExcluded(o.Publish.ProviderName)...)
	}
	if o.CredentialProvidersReloadInterval < 0 {
		errs = append(errs, fmt.Errorf("--credential-providers-reload-interval must not be negative, not %v", o.CredentialProvidersReloadInterval))
	}
	if o.CertCacheSize < 0 {
		errs = append(errs, fmt.Errorf("--authentication-certificate-cache-size must not be negative, not %d", o.CertCacheSize))
	}
	if o.ServerRun.ShutdownSendRetryAfter {
		errs = append(errs, errors.New("--shutdown-send-retry-after is not supported by the gateway's handler chain; --shutdown-delay-duration keeps readiness false while load balancers stop sending"))
	}
	if o.ServerRun.ShutdownWatchTerminationGracePeriod > 0 {
		errs = append(errs, errors.New("--shutdown-watch-termination-grace-period is not supported by the gateway: it ends proxied watches on shutdown itself (--shutdown-stream-drain)"))
	}
	if o.StockHandlerChain && o.StockProxyPath {
		errs = append(errs, errors.New("--ab-stock-handler-chain and --ab-stock-proxy-path are two A/B variants: set one at most"))
	}
	if o.ShutdownStreamDrain < 0 {
		errs = append(errs, fmt.Errorf("--shutdown-stream-drain must not be negative, not %v", o.ShutdownStreamDrain))
	}
	errs = append(errs, o.Endpoints.Validate()...)
	errs = append(errs, o.Pool.Validate()...)
	errs = append(errs, o.Konnectivity.Validate()...)
	errs = append(errs, o.Fairness.Validate()...)
	errs = append(errs, o.validateLimits()...)
	errs = append(errs, o.Health.Validate()...)
	errs = append(errs, o.Inventory.Validate()...)
	if err := o.ClusterMetrics.Validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, o.Publish.Validate()...)
	errs = append(errs, o.Fanout.Validate()...)
	if o.Publish.Enabled && !o.Inventory.Enabled() { // the publisher holds the sync's Lease
		errs = append(errs, o.Inventory.ValidateLease()...)
	}
	return errors.Join(errs...)
}

// ServerConfig turns the completed, valid flags into the server's
// configuration.
func (o *Options) ServerConfig() (*apiserver.Config, error) {
	cfg := apiserver.NewConfig()
	if err := o.ServerRun.ApplyTo(&cfg.Generic.Config); err != nil {
		return nil, err
	}
	// One client-CA provider: the generic server asks for client
	// certificates and authenticates users with it, and pkg/certauth
	// verifies with the same one, so a CA removed from the bundle is
	// refused by both at the same moment.
	rec := o.Recommended
	var clientCA dynamiccertificates.CAContentProvider
	if a := rec.Authentication; a != nil && o.CertCacheSize > 0 {
		var err error
		if clientCA, err = clientCAProvider(a); err != nil {
			return nil, err
		}
		if clientCA != nil {
			withCA := *a
			withCA.ClientCert.CAContentProvider = clientCA
			r := *rec
			r.Authentication = &withCA
			rec = &r
		}
	}
	if err := rec.ApplyTo(cfg.Generic); err != nil {
		return nil, err
	}
	endpoints, err := o.Endpoints.Policy()
	if err != nil {
		return nil, err
	}
	cfg.Extra = apiserver.ExtraConfig{
		SecretNamespace:     o.SecretNamespace,
		SourceNamespaces:    append([]string{o.SecretNamespace}, o.SourceNamespaces...),
		CredentialProviders: o.credentialProviders,
		CredentialProvidersReload: credentials.ReloadConfig{File: o.CredentialProvidersFile, DefaultTimeout: o.CredentialProviderTimeout,
			Interval: o.CredentialProvidersReloadInterval},
		AuthorizeProxySubpath: o.AuthorizeProxySubpath,
		Pool:                  *o.Pool,
		Konnectivity:          *o.Konnectivity,
		Fairness:              *o.Fairness,
		Health:                *o.Health,
		Inventory:             *o.Inventory,
		ClusterMetrics:        o.ClusterMetrics,
		Publish:               *o.Publish,
		Fanout:                o.Fanout,
		ShutdownStreamDrain:   o.ShutdownStreamDrain,
		Tracing:               o.Recommended.Traces != nil && o.Recommended.Traces.ConfigFile != "",
		StockHandlerChain:     o.StockHandlerChain,
		StockProxyPath:        o.StockProxyPath,
		TracingNoExporter:     o.TracingNoExporter,
		NoStackGrowth:         o.NoStackGrowth,
	}
	cfg.Extra.Pool.Endpoints = endpoints
	cfg.Extra.CertCacheSize = o.CertCacheSize
	cfg.Extra.ClientCA = clientCA
	return cfg, nil
}

// validateLimits refuses per-cluster bounds that let one saturated cluster
// take every in-flight slot of the generic server: an ordinary request holds
// one while in flight or queued.
func (o *Options) validateLimits() []error {
	f := o.Fairness
	if f.MaxRequests <= 0 || f.MaxQueued < 0 { // 0: off; negative: refused by the fairness options
		return nil
	}
	// In uint64: a huge --max-queued-per-cluster must not wrap the sum
	// negative and pass.
	per := uint64(f.MaxRequests) + uint64(f.MaxQueued)
	var errs []error
	for _, g := range []struct {
		flag string
		n    int
	}{
		{"--max-requests-inflight", o.ServerRun.MaxRequestsInFlight},
		{"--max-mutating-requests-inflight", o.ServerRun.MaxMutatingRequestsInFlight},
	} {
		if g.n > 0 && per >= uint64(g.n) {
			errs = append(errs, fmt.Errorf("--max-requests-per-cluster + --max-queued-per-cluster (%d) must be less than %s (%d), or one saturated cluster takes every slot; keep it well under (docs/isolation.md)", per, g.flag, g.n))
		}
	}
	return errs
}

// clientCAProvider is the CA of users' client certificates, found as the
// generic server's delegated authentication finds it (k8s.io/apiserver
// DelegatingAuthenticationOptions.ApplyTo and getClient): --client-ca-file,
// else the hub's extension-apiserver-authentication ConfigMap, read with
// --authentication-kubeconfig or the in-cluster configuration. The generic
// server's secure serving runs its controller.
func clientCAProvider(a *genericoptions.DelegatingAuthenticationOptions) (dynamiccertificates.CAContentProvider, error) {
	if a.ClientCert.ClientCA != "" || a.ClientCert.CAContentProvider != nil || a.SkipInClusterLookup {
		return a.ClientCert.GetClientCAContentProvider()
	}
	var hub *rest.Config
	var err error
	if a.RemoteKubeConfigFile != "" {
		hub, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: a.RemoteKubeConfigFile}, &clientcmd.ConfigOverrides{}).ClientConfig()
	} else if hub, err = rest.InClusterConfig(); err != nil && a.RemoteKubeConfigFileOptional {
		return nil, nil // as the generic server: no client CA then
	}
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig for delegated authentication, to find the client CA: %w", err)
	}
	client, err := kubernetes.NewForConfig(hub)
	if err != nil {
		return nil, err
	}
	return dynamiccertificates.NewDynamicCAFromConfigMapController("client-ca", metav1.NamespaceSystem, "extension-apiserver-authentication", "client-ca-file", client)
}
