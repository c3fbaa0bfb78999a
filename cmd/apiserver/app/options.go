// Package app is the gateway's command line: its flags and how they become a
// running server.
package app

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	cliflag "k8s.io/component-base/cli/flag"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/apiserver"
	"github.com/clustergateway/cluster-gateway/pkg/endpointpolicy"
	"github.com/clustergateway/cluster-gateway/pkg/logredact"
	"github.com/clustergateway/cluster-gateway/pkg/pool"
	"github.com/clustergateway/cluster-gateway/pkg/pool/konnectivity"
	"github.com/clustergateway/cluster-gateway/pkg/proxy"
)

// Options are the gateway's flags.
type Options struct {
	Recommended *genericoptions.RecommendedOptions
	ServerRun   *genericoptions.ServerRunOptions
	Logs        *logsapi.LoggingConfiguration
	Endpoints   *endpointpolicy.Options

	SecretNamespace       string
	PoolCapacity          int
	PoolIdleTTL           time.Duration
	RetireGracePeriod     time.Duration
	DialTimeout           time.Duration
	AuthorizeProxySubpath bool

	KonnectivityAddress        string
	KonnectivityCAFile         string
	KonnectivityCertFile       string
	KonnectivityKeyFile        string
	KonnectivityReloadInterval time.Duration
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
		Recommended:                rec,
		ServerRun:                  genericoptions.NewServerRunOptions(),
		Logs:                       logsapi.NewLoggingConfiguration(),
		Endpoints:                  endpointpolicy.NewOptions(),
		SecretNamespace:            "cluster-gateway-system",
		PoolCapacity:               1000,
		PoolIdleTTL:                30 * time.Minute,
		RetireGracePeriod:          5 * time.Minute,
		DialTimeout:                10 * time.Second,
		KonnectivityReloadInterval: 30 * time.Second,
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
	fs.BoolVar(&o.AuthorizeProxySubpath, "authorize-proxy-subpath", o.AuthorizeProxySubpath, "Also authorize each proxied request's inner verb, resource, namespace and name (or non-resource path) against the hub for the caller.")

	o.Endpoints.AddFlags(fs)

	fs = fss.FlagSet("pool")
	fs.IntVar(&o.PoolCapacity, "pool-capacity", o.PoolCapacity, "Most clusters with a pooled transport at once; the least recently used is retired beyond it.")
	fs.DurationVar(&o.PoolIdleTTL, "pool-idle-ttl", o.PoolIdleTTL, "A cluster's pooled transport unused this long is retired (0: never).")
	fs.DurationVar(&o.RetireGracePeriod, "retire-grace-period", o.RetireGracePeriod, "How long live streams (watch, exec, logs -f) on a retired transport or tunnel may go on before they are closed.")
	fs.DurationVar(&o.DialTimeout, "dial-timeout", o.DialTimeout, "Bound on connecting to a managed cluster (TCP or tunnel, and TLS); beyond it the request fails with 503.")

	fs = fss.FlagSet("konnectivity")
	fs.StringVar(&o.KonnectivityAddress, "konnectivity-server-address", o.KonnectivityAddress, "host:port of the konnectivity proxy-server (gRPC mode) that Konnectivity endpoints are dialed through.")
	fs.StringVar(&o.KonnectivityCAFile, "konnectivity-ca-file", o.KonnectivityCAFile, "CA that signs the proxy-server's serving certificate. Reloaded on change.")
	fs.StringVar(&o.KonnectivityCertFile, "konnectivity-cert-file", o.KonnectivityCertFile, "Client certificate for the proxy-server. Reloaded on change.")
	fs.StringVar(&o.KonnectivityKeyFile, "konnectivity-key-file", o.KonnectivityKeyFile, "Client key for the proxy-server. Reloaded on change.")
	fs.DurationVar(&o.KonnectivityReloadInterval, "konnectivity-reload-interval", o.KonnectivityReloadInterval, "How often the konnectivity CA, certificate and key files are re-read.")
	return fss
}

// Validate checks the flags.
func (o *Options) Validate() error {
	var errs []error
	errs = append(errs, o.Recommended.Validate()...)
	errs = append(errs, o.ServerRun.Validate()...)
	errs = append(errs, o.Endpoints.Validate()...)
	if o.SecretNamespace == "" {
		errs = append(errs, fmt.Errorf("--secret-namespace must not be empty"))
	}
	if o.PoolCapacity < 1 {
		errs = append(errs, fmt.Errorf("--pool-capacity must be at least 1"))
	}
	if o.DialTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--dial-timeout must be positive"))
	}
	if o.KonnectivityAddress != "" {
		if _, _, err := net.SplitHostPort(o.KonnectivityAddress); err != nil {
			errs = append(errs, fmt.Errorf("--konnectivity-server-address must be host:port: %v", err))
		}
		if o.KonnectivityCAFile == "" || o.KonnectivityCertFile == "" || o.KonnectivityKeyFile == "" {
			errs = append(errs, fmt.Errorf("--konnectivity-ca-file, --konnectivity-cert-file and --konnectivity-key-file are required with --konnectivity-server-address"))
		}
	}
	return utilerrors.NewAggregate(errs)
}

// Config turns the flags into the server's configuration.
func (o *Options) Config() (*apiserver.Config, error) {
	if err := o.Recommended.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil, []net.IP{net.ParseIP("127.0.0.1")}); err != nil {
		return nil, fmt.Errorf("creating self-signed certificates: %w", err)
	}
	gc := genericapiserver.NewRecommendedConfig(apiserver.Codecs)
	gc.EffectiveVersion = basecompatibility.NewEffectiveVersionFromString("1.37", "", "")
	namer := openapinamer.NewDefinitionNamer(apiserver.Scheme)
	gc.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(v1alpha1.GetOpenAPIDefinitions, namer)
	gc.OpenAPIConfig.Info.Title = "Cluster Gateway"
	gc.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(v1alpha1.GetOpenAPIDefinitions, namer)
	gc.OpenAPIV3Config.Info.Title = "Cluster Gateway"
	if err := o.ServerRun.ApplyTo(&gc.Config); err != nil {
		return nil, err
	}
	if err := o.Recommended.ApplyTo(gc); err != nil {
		return nil, err
	}
	// Proxied watches, logs -f, exec and port-forward stream; everything else
	// keeps the request timeout and the in-flight limit.
	gc.LongRunningFunc = proxy.IsLongRunning
	gc.BuildHandlerChainFunc = func(h http.Handler, c *genericapiserver.Config) http.Handler {
		return genericapiserver.DefaultBuildHandlerChain(proxy.WithDryRunPassthrough(h), c)
	}

	endpoints, err := o.Endpoints.Policy()
	if err != nil {
		return nil, err
	}
	cfg := &apiserver.Config{
		Generic: gc,
		Extra: apiserver.ExtraConfig{
			SecretNamespace:       o.SecretNamespace,
			AuthorizeProxySubpath: o.AuthorizeProxySubpath,
			Pool: pool.Options{
				Capacity:    o.PoolCapacity,
				IdleTTL:     o.PoolIdleTTL,
				RetireGrace: o.RetireGracePeriod,
				DialTimeout: o.DialTimeout,
				Endpoints:   endpoints,
			},
		},
	}
	if o.KonnectivityAddress != "" {
		cfg.Extra.Konnectivity = &konnectivity.Options{
			Address:        o.KonnectivityAddress,
			CAFile:         o.KonnectivityCAFile,
			CertFile:       o.KonnectivityCertFile,
			KeyFile:        o.KonnectivityKeyFile,
			ReloadInterval: o.KonnectivityReloadInterval,
			RetireGrace:    o.RetireGracePeriod,
			DialTimeout:    o.DialTimeout,
		}
	}
	return cfg, nil
}

// NewCommand is the gateway's root command; it runs until ctx is done.
func NewCommand(ctx context.Context) *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "cluster-gateway",
		Short: "Cluster Gateway: an aggregated API server that proxies to managed clusters",
		Long: `Cluster Gateway serves gateway.clustergateway.io/v1alpha1 ClusterGateways, stored as Secrets in
one hub namespace, and their proxy subresource, which forwards any request to that managed cluster.`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Log output passes through a redactor: no token, key or client
			// credential reaches a log at any verbosity (see pkg/logredact).
			if err := logsapi.ValidateAndApplyWithOptions(o.Logs, &logsapi.LoggingOptions{
				ErrorStream: logredact.NewWriter(os.Stderr),
				InfoStream:  logredact.NewWriter(os.Stdout),
			}, nil); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			cfg, err := o.Config()
			if err != nil {
				return err
			}
			s, err := cfg.New()
			if err != nil {
				return err
			}
			return s.Run(ctx)
		},
	}
	fs := cmd.Flags()
	fss := o.Flags()
	for _, f := range fss.FlagSets {
		fs.AddFlagSet(f)
	}
	cols, _, _ := termSize(cmd)
	cliflag.SetUsageAndHelpFunc(cmd, fss, cols)
	logs.AddFlags(pflag.NewFlagSet("unused", pflag.ContinueOnError))
	return cmd
}

func termSize(*cobra.Command) (int, int, error) { return 100, 0, nil }
