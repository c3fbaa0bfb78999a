package publish

import (
	"fmt"
	"net/url"
	"os"
	"time"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/clustergateway/cluster-gateway/pkg/cabundle"
)

// DefaultProviderName is the access provider name the gateway publishes
// under unless told otherwise.
const DefaultProviderName = "cluster-gateway"

// Config switches the publisher on: plain config whose flags are defined
// in cmd/apiserver/app/options. DefaultConfig has the defaults (off),
// Validate the rules; New refuses what Validate refuses.
type Config struct {
	// Enabled publishes the gateways (off by default).
	Enabled bool
	// Selector is a label selector over ClusterGateways: those it matches
	// are published. Empty: all.
	Selector string
	// Namespace holds the ClusterProfiles the publisher creates.
	Namespace string
	// ProviderName is the name of the gateway's access provider entry.
	ProviderName string
	// HubServer is the hub's URL as consumers reach it (https://host[:port]).
	HubServer string
	// HubCAFile is a PEM bundle of the CA that consumers verify the hub
	// with; empty: none (the hub's certificate is publicly trusted).
	HubCAFile string
	// HubCAReloadInterval is how often HubCAFile is read for changes (0:
	// never; it is read at start).
	HubCAReloadInterval time.Duration
}

// DefaultConfig returns the defaults: off.
func DefaultConfig() *Config {
	return &Config{ProviderName: DefaultProviderName, HubCAReloadInterval: 10 * time.Second}
}

// Validate checks the config when publishing is on.
func (c *Config) Validate() []error {
	if !c.Enabled {
		return nil
	}
	var errs []error
	if _, err := labels.Parse(c.Selector); err != nil {
		errs = append(errs, fmt.Errorf("--publish-gateway-selector: %v", err))
	}
	if msgs := apivalidation.ValidateNamespaceName(c.Namespace, false); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--publish-namespace: %q is not a namespace name (it is required with --publish-clusterprofiles): %v", c.Namespace, msgs))
	}
	if msgs := apivalidation.NameIsDNSSubdomain(c.ProviderName, false); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--publish-provider-name: %q is not a provider name: %v", c.ProviderName, msgs))
	}
	if _, err := hubBase(c.HubServer); err != nil {
		errs = append(errs, err)
	}
	if c.HubCAFile != "" {
		if _, err := LoadHubCA(c.HubCAFile); err != nil {
			errs = append(errs, err)
		}
	}
	if c.HubCAReloadInterval < 0 {
		errs = append(errs, fmt.Errorf("--publish-hub-ca-reload-interval must not be negative, not %v", c.HubCAReloadInterval))
	}
	return errs
}

// hubBase is the hub URL without a trailing slash, or why it cannot be one.
func hubBase(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("--publish-hub-server: %q must be the hub's https URL as consumers reach it, e.g. https://hub.example.com:6443 (no user, query or fragment)", s)
	}
	return u.Scheme + "://" + u.Host + trimSlash(u.EscapedPath()), nil
}

func trimSlash(p string) string {
	for len(p) > 0 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	return p
}

// maxCABytes bounds the hub CA file: it is copied into every profile.
const maxCABytes = 64 << 10

// LoadHubCA reads the hub CA bundle: PEM certificates only. A file holding
// anything else (a private key above all) is refused, since its bytes are
// published to everyone who may read ClusterProfiles.
func LoadHubCA(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--publish-hub-ca-file: %w", err)
	}
	if len(b) > maxCABytes {
		return nil, fmt.Errorf("--publish-hub-ca-file %s: %d bytes, more than the %d a CA bundle needs", path, len(b), maxCABytes)
	}
	// The same strict reading as every CA bundle the gateway uses
	// (pkg/cabundle): certificates only, none truncated, at least one.
	if _, err := cabundle.Parse(b); err != nil {
		return nil, fmt.Errorf("--publish-hub-ca-file %s: %w (its bytes are published to every ClusterProfile reader)", path, err)
	}
	return b, nil
}
