package inventory

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	if errs := DefaultConfig().Validate(); len(errs) > 0 {
		t.Errorf("the defaults (off): %v", errs)
	}
	on := func(edit func(*Config)) *Config {
		o := DefaultConfig()
		o.Sources = []string{"capi"}
		edit(o)
		return o
	}
	if errs := on(func(*Config) {}).Validate(); len(errs) > 0 {
		t.Errorf("--inventory-sync=capi: %v", errs)
	}
	for _, c := range []struct {
		o    *Config
		want string
	}{
		{on(func(o *Config) { o.Sources = []string{"capi", "cluster-api"} }), `"cluster-api" is not an inventory`},
		{on(func(o *Config) { o.Sources = []string{"clusterprofile"} }), "needs credential providers"},
		{on(func(o *Config) { o.Providers = []string{"Not_A_Name"} }), "is not a provider name"},
		{on(func(o *Config) { o.LeaseDuration = o.RenewDeadline }), "--inventory-sync-lease-duration"},
		{on(func(o *Config) { o.RetryPeriod = 9 * time.Second }), "--inventory-sync-renew-deadline"},
		{on(func(o *Config) { o.RetryPeriod = 0 }), "--inventory-sync-retry-period must be positive"},
	} {
		if err := errors.Join(c.o.Validate()...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", c.o, err, c.want)
		}
	}
}

// completeProviders is what the gateway's options do with the providers
// file's names: default (Complete), then check (Validate).
func completeProviders(o *Config, configured []string) []error {
	o.DefaultProviders(configured)
	return o.ValidateProviders(configured)
}

// --inventory-sync-providers defaults to every configured provider; given,
// it may only narrow them.
func TestCompleteProviders(t *testing.T) {
	o := DefaultConfig()
	o.Sources = []string{"clusterprofile"}
	if errs := completeProviders(o, []string{"eks", "gke"}); len(errs) > 0 || strings.Join(o.Providers, ",") != "eks,gke" {
		t.Errorf("no flag: %v, %v; want every configured provider", o.Providers, errs)
	}
	if errs := completeProviders(o, []string{"aks"}); len(errs) > 0 || strings.Join(o.Providers, ",") != "aks" {
		t.Errorf("completed again for another file: %v, %v; want its providers", o.Providers, errs)
	}
	if errs := o.Validate(); len(errs) > 0 {
		t.Errorf("Validate after the default: %v", errs)
	}

	o = DefaultConfig()
	o.Sources, o.Providers = []string{"clusterprofile"}, []string{"gke"}
	if errs := completeProviders(o, []string{"eks", "gke"}); len(errs) > 0 || strings.Join(o.Providers, ",") != "gke" {
		t.Errorf("--inventory-sync-providers=gke: %v, %v; want gke alone", o.Providers, errs)
	}
	o.Providers = []string{"gke", "aks"}
	err := errors.Join(completeProviders(o, []string{"eks", "gke"})...)
	if err == nil || !strings.Contains(err.Error(), `"aks" is not a provider of --credential-providers-file (which has eks, gke): add it`) || strings.Contains(err.Error(), `"gke"`) {
		t.Errorf("--inventory-sync-providers=gke,aks: %v, want aks refused and what to do", err)
	}
	if err := errors.Join(completeProviders(o, nil)...); err == nil || !strings.Contains(err.Error(), "configures none") {
		t.Errorf("no providers file: %v, want the names refused", err)
	}

	o = DefaultConfig()
	o.Sources = []string{"clusterprofile"}
	completeProviders(o, nil)
	if err := errors.Join(o.Validate()...); err == nil || !strings.Contains(err.Error(), "configure them in --credential-providers-file") {
		t.Errorf("clusterprofile without providers: %v, want it to say where to configure them", err)
	}
}

// The gateway's own provider name is dropped from the default providers and
// refused when named: the sync never makes a gateway from its own entry.
func TestExcludeProvider(t *testing.T) {
	o := DefaultConfig()
	o.DefaultProviders([]string{"a", "cluster-gateway"})
	o.ExcludeFromDefault("cluster-gateway")
	if errs := o.ValidateExcluded("cluster-gateway"); len(errs) > 0 || len(o.Providers) != 1 || o.Providers[0] != "a" {
		t.Errorf("defaulted: providers %v, errors %v; want [a]", o.Providers, errs)
	}
	o = DefaultConfig()
	o.Providers = []string{"cluster-gateway"}
	o.DefaultProviders([]string{"a", "cluster-gateway"})
	o.ExcludeFromDefault("cluster-gateway")
	if errs := o.ValidateExcluded("cluster-gateway"); len(errs) != 1 || len(o.Providers) != 1 {
		t.Errorf("named: providers %v, errors %v; want it kept and one error", o.Providers, errs)
	}
}
