package inventory

import (
	"fmt"
	"slices"
	"strings"
	"time"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
)

// Config switches the inventory sync on and times its leader election:
// plain config whose flags are defined in cmd/apiserver/app/options.
// DefaultConfig has the defaults (off), Validate the rules.
type Config struct {
	// Sources are the inventories synced: SourceCAPI, SourceClusterProfile.
	// None: the sync is off.
	Sources []string
	// Providers are the credential providers a ClusterProfile's access
	// providers may name; a profile naming none of them gets no gateway.
	// Empty: all the configured ones (DefaultProviders).
	Providers []string
	// defaulted: Providers are DefaultProviders' default, not the flag's.
	defaulted bool
	// The Lease: how long a leader holds it unrenewed, how long the leader
	// keeps trying to renew before it gives up, and how often candidates try.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// DefaultConfig returns the defaults: the sync off, client-go's usual Lease timing.
func DefaultConfig() *Config {
	return &Config{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
}

// Enabled tells whether any inventory is synced.
func (c *Config) Enabled() bool { return len(c.Sources) > 0 }

// Syncs tells whether the inventory src is synced.
func (c *Config) Syncs(src Source) bool { return slices.Contains(c.Sources, string(src)) }

// DefaultProviders has Providers default to configured, the names of the
// credential providers of --credential-providers-file, when the flag did
// not name any (or named none but an earlier default). The options'
// Complete calls it once the providers file is read.
func (c *Config) DefaultProviders(configured []string) {
	if c.defaulted || len(c.Providers) == 0 {
		c.Providers, c.defaulted = slices.Clone(configured), len(configured) > 0
	}
}

// ValidateProviders refuses a name given in --inventory-sync-providers that
// is not among configured, the providers of --credential-providers-file.
func (c *Config) ValidateProviders(configured []string) []error {
	var errs []error
	for _, p := range c.Providers {
		if !slices.Contains(configured, p) {
			has := "configures none"
			if len(configured) > 0 {
				has = "has " + strings.Join(configured, ", ")
			}
			errs = append(errs, fmt.Errorf("--inventory-sync-providers: %q is not a provider of --credential-providers-file (which %s): add it to that file, or leave it out of --inventory-sync-providers (without the flag, every provider of the file may be named)", p, has))
		}
	}
	return errs
}

// ExcludeFromDefault keeps the provider name, the one the gateway
// publishes itself under (pkg/publish), out of the default Providers (every
// provider of the file): the sync never makes a gateway from the gateway's
// own entry. Call it after DefaultProviders; ValidateExcluded refuses the
// name when --inventory-sync-providers lists it.
func (c *Config) ExcludeFromDefault(name string) {
	if c.defaulted {
		c.Providers = slices.DeleteFunc(c.Providers, func(p string) bool { return p == name })
	}
}

// ValidateExcluded refuses Providers that name the provider the gateway
// publishes itself under.
func (c *Config) ValidateExcluded(name string) []error {
	if !slices.Contains(c.Providers, name) {
		return nil
	}
	return []error{fmt.Errorf("--inventory-sync-providers: %q is the name the gateway publishes itself under (--publish-provider-name): a gateway made from that entry would proxy to itself; leave it out", name)}
}

// Validate refuses unknown inventories, a ClusterProfile sync without
// providers, and Lease timing that client-go's leader election refuses.
func (c *Config) Validate() []error {
	var errs []error
	for _, s := range c.Sources {
		if s != string(SourceCAPI) && s != string(SourceClusterProfile) {
			errs = append(errs, fmt.Errorf("--inventory-sync: %q is not an inventory; use capi, clusterprofile or both", s))
		}
	}
	if c.Syncs(SourceClusterProfile) && len(c.Providers) == 0 {
		errs = append(errs, fmt.Errorf("--inventory-sync=clusterprofile needs credential providers for the ClusterProfiles to name: configure them in --credential-providers-file (all of them may then be named, or those --inventory-sync-providers lists)"))
	}
	for _, p := range c.Providers {
		if msgs := apivalidation.NameIsDNSSubdomain(p, false); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--inventory-sync-providers: %q is not a provider name: %v", p, msgs))
		}
	}
	if c.Enabled() {
		errs = append(errs, c.ValidateLease()...)
	}
	return errs
}

// ValidateLease refuses Lease timing that client-go's leader election
// refuses; Validate checks it when a sync is on, and the ClusterProfile
// publisher, which holds the same Lease, when it is on.
func (c *Config) ValidateLease() []error {
	var errs []error
	if c.RetryPeriod <= 0 {
		errs = append(errs, fmt.Errorf("--inventory-sync-retry-period must be positive, not %v", c.RetryPeriod))
	}
	// As client-go's leaderelection.NewLeaderElector requires.
	if c.RenewDeadline <= time.Duration(1.2*float64(c.RetryPeriod)) {
		errs = append(errs, fmt.Errorf("--inventory-sync-renew-deadline (%v) must be more than 1.2 x --inventory-sync-retry-period (%v)", c.RenewDeadline, c.RetryPeriod))
	}
	if c.LeaseDuration <= c.RenewDeadline {
		errs = append(errs, fmt.Errorf("--inventory-sync-lease-duration (%v) must be more than --inventory-sync-renew-deadline (%v)", c.LeaseDuration, c.RenewDeadline))
	}
	return errs
}
