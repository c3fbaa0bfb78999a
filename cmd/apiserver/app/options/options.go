// Package options holds the gateway's flags: the generic API server's and
// each component's own (pool, konnectivity, endpoint policy, per-cluster
// limits), validated in one pass and turned into the server's configuration.
package options

import (
	"errors"
	"fmt"
	"net"

	genericoptions "k8s.io/apiserver/pkg/server/options"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/apiserver"
	"github.com/clustergateway/cluster-gateway/pkg/endpointpolicy"
	"github.com/clustergateway/cluster-gateway/pkg/fairness"
	"github.com/clustergateway/cluster-gateway/pkg/pool"
	"github.com/clustergateway/cluster-gateway/pkg/pool/konnectivity"
)

// Options are the gateway's flags.
type Options struct {
	Recommended *genericoptions.RecommendedOptions
	ServerRun   *genericoptions.ServerRunOptions
	Logs        *logsapi.LoggingConfiguration

	SecretNamespace       string
	AuthorizeProxySubpath bool

	Pool         *pool.Options
	Konnectivity *konnectivity.Options
	Endpoints    *endpointpolicy.Options
	Fairness     *fairness.Options
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
		Recommended:     rec,
		ServerRun:       genericoptions.NewServerRunOptions(),
		Logs:            logsapi.NewLoggingConfiguration(),
		SecretNamespace: "cluster-gateway-system",
		Pool:            pool.NewOptions(),
		Konnectivity:    konnectivity.NewOptions(),
		Endpoints:       endpointpolicy.NewOptions(),
		Fairness:        fairness.NewOptions(),
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
	o.Pool.AddFlags(fss.FlagSet("pool"))
	o.Konnectivity.AddFlags(fss.FlagSet("konnectivity"))
	o.Fairness.AddFlags(fss.FlagSet("per-cluster limits"))
	return fss
}

// Validate checks every flag and reports all problems at once.
func (o *Options) Validate() error {
	var errs []error
	errs = append(errs, o.Recommended.Validate()...)
	errs = append(errs, o.ServerRun.Validate()...)
	if o.SecretNamespace == "" {
		errs = append(errs, errors.New("--secret-namespace must not be empty"))
	}
	errs = append(errs, o.Endpoints.Validate()...)
	errs = append(errs, o.Pool.Validate()...)
	errs = append(errs, o.Konnectivity.Validate()...)
	errs = append(errs, o.Fairness.Validate()...)
	errs = append(errs, o.validateLimits()...)
	return errors.Join(errs...)
}

// ServerConfig turns the flags into the server's configuration.
func (o *Options) ServerConfig() (*apiserver.Config, error) {
	if err := o.Recommended.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil, []net.IP{net.ParseIP("127.0.0.1")}); err != nil {
		return nil, fmt.Errorf("creating self-signed certificates: %w", err)
	}
	cfg := apiserver.NewConfig()
	if err := o.ServerRun.ApplyTo(&cfg.Generic.Config); err != nil {
		return nil, err
	}
	if err := o.Recommended.ApplyTo(cfg.Generic); err != nil {
		return nil, err
	}
	endpoints, err := o.Endpoints.Policy()
	if err != nil {
		return nil, err
	}
	cfg.Extra = apiserver.ExtraConfig{
		SecretNamespace:       o.SecretNamespace,
		AuthorizeProxySubpath: o.AuthorizeProxySubpath,
		Pool:                  *o.Pool,
		Konnectivity:          *o.Konnectivity,
		Fairness:              *o.Fairness,
	}
	cfg.Extra.Pool.Endpoints = endpoints
	return cfg, nil
}

// validateLimits refuses per-cluster bounds that let one saturated cluster
// take every in-flight slot of the generic server: an ordinary request holds
// one while in flight or queued.
func (o *Options) validateLimits() []error {
	f := o.Fairness
	if f.MaxRequests == 0 {
		return nil
	}
	per := f.MaxRequests + f.MaxQueued
	var errs []error
	for _, g := range []struct {
		flag string
		n    int
	}{
		{"--max-requests-inflight", o.ServerRun.MaxRequestsInFlight},
		{"--max-mutating-requests-inflight", o.ServerRun.MaxMutatingRequestsInFlight},
	} {
		if g.n > 0 && per >= g.n {
			errs = append(errs, fmt.Errorf("--max-requests-per-cluster + --max-queued-per-cluster (%d) must be less than %s (%d), or one saturated cluster takes every slot; keep it well under (see docs/metrics.md, per-cluster limits)", per, g.flag, g.n))
		}
	}
	return errs
}
