package credentials

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	clientauthv1 "k8s.io/client-go/pkg/apis/clientauthentication/v1"
	clientauthv1beta1 "k8s.io/client-go/pkg/apis/clientauthentication/v1beta1"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"sigs.k8s.io/yaml"
)

// The providers file's apiVersion and kind.
const (
	ConfigAPIVersion = "gateway.clustergateway.io/v1alpha1"
	ConfigKind       = "CredentialProviderConfig"
)

// DefaultTimeout bounds a provider's run unless the file or the flag says
// otherwise.
const DefaultTimeout = 30 * time.Second

// Config is the providers file (--credential-providers-file).
type Config struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Providers  []Provider `json:"providers"`

	clusterProfileFormat bool   // read from a SIG-Multicluster provider file
	raw                  []byte // the file's content, as LoadConfig read it
}

// Provider is one named exec plugin. Exec has the shape of a kubeconfig
// user's exec section; only command, args, env and apiVersion are used
// (installHint too, which is shown nowhere): the provider runs
// non-interactively, always gets the cluster's information in
// KUBERNETES_EXEC_INFO, and gets no environment but Exec.Env.
type Provider struct {
	Name string `json:"name"`
	// Timeout bounds one run; the process (group) is killed after it.
	// Empty: --credential-provider-timeout.
	Timeout string                 `json:"timeout,omitempty"`
	Exec    clientcmdv1.ExecConfig `json:"exec"`

	// ProfileSourcedCLIArgsPolicy and ProfileSourcedEnvVarsPolicy are
	// KEP-5339's: whether a gateway's spec.credential.provider.additionalArgs
	// are appended to Exec.Args (Append) or dropped (Ignore, or empty), and
	// whether its additionalEnv is added where Exec.Env does not set the
	// name (AppendIfNotExists) or dropped (Ignore, or empty). Replace, which
	// would let a ClusterProfile writer override Exec.Env, is refused.
	ProfileSourcedCLIArgsPolicy string `json:"profileSourcedCLIArgsPolicy,omitempty"`
	ProfileSourcedEnvVarsPolicy string `json:"profileSourcedEnvVarsPolicy,omitempty"`

	timeout time.Duration
}

// KEP-5339's policy values the gateway applies.
const (
	ArgsPolicyAppend           = "Append"
	EnvPolicyAppendIfNotExists = "AppendIfNotExists"
	PolicyIgnore               = "Ignore"
)

// LoadConfig reads and validates the providers file; defaultTimeout
// applies to providers that set none. The file is either a
// CredentialProviderConfig or, without apiVersion and kind, a
// SIG-Multicluster provider file (see parseClusterProfileProviders).
func LoadConfig(path string, defaultTimeout time.Duration) (*Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--credential-providers-file: %w", err)
	}
	c, err := parseConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("--credential-providers-file %s: %w", path, err)
	}
	if err := c.validate(defaultTimeout); err != nil {
		return nil, fmt.Errorf("--credential-providers-file %s: %w", path, err)
	}
	c.raw = raw
	return c, nil
}

// parseConfig tells the two formats apart by apiVersion and kind: a
// CredentialProviderConfig has them, a SIG-Multicluster provider file has
// neither.
func parseConfig(raw []byte) (*Config, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("neither a %s nor a SIG-Multicluster provider file: %w", ConfigKind, err)
	}
	if head.APIVersion == "" && head.Kind == "" {
		return parseClusterProfileProviders(raw)
	}
	var c Config
	if err := yaml.UnmarshalStrict(raw, &c); err != nil {
		return nil, fmt.Errorf("not a %s (check the field names): %w", ConfigKind, err)
	}
	return &c, nil
}

// clusterProfileProviders is the SIG-Multicluster provider file
// (sigs.k8s.io/cluster-inventory-api pkg/access, read by Argo CD,
// MultiKueue and multicluster-runtime with --clusterprofile-provider-file),
// so that one file serves the gateway and its other consumers.
type clusterProfileProviders struct {
	Providers []struct {
		Name       string                 `json:"name"`
		ExecConfig clientcmdv1.ExecConfig `json:"execConfig"`
		// KEP-5339's policies for a ClusterProfile's additional-args and
		// additional-envs extensions (see profilePolicies).
		ProfileSourcedCLIArgsPolicy string `json:"profileSourcedCLIArgsPolicy,omitempty"`
		ProfileSourcedEnvVarsPolicy string `json:"profileSourcedEnvVarsPolicy,omitempty"`
		// Timeout is the gateway's own addition; other readers ignore it.
		Timeout string `json:"timeout,omitempty"`
	} `json:"providers"`
}

func parseClusterProfileProviders(raw []byte) (*Config, error) {
	var f clusterProfileProviders
	if err := yaml.UnmarshalStrict(raw, &f); err != nil {
		return nil, fmt.Errorf("not a SIG-Multicluster provider file ({providers: [{name, execConfig}]}; check the field names) nor, without apiVersion and kind, a %s: %w", ConfigKind, err)
	}
	c := &Config{APIVersion: ConfigAPIVersion, Kind: ConfigKind, Providers: make([]Provider, len(f.Providers)), clusterProfileFormat: true}
	for i, p := range f.Providers {
		c.Providers[i] = Provider{Name: p.Name, Timeout: p.Timeout, Exec: p.ExecConfig,
			ProfileSourcedCLIArgsPolicy: p.ProfileSourcedCLIArgsPolicy, ProfileSourcedEnvVarsPolicy: p.ProfileSourcedEnvVarsPolicy}
	}
	return c, nil
}

func (c *Config) validate(defaultTimeout time.Duration) error {
	var errs []error
	if c.APIVersion != ConfigAPIVersion || c.Kind != ConfigKind {
		errs = append(errs, fmt.Errorf("apiVersion and kind must be %s and %s, not %q and %q", ConfigAPIVersion, ConfigKind, c.APIVersion, c.Kind))
	}
	seen := map[string]bool{}
	for i := range c.Providers {
		p := &c.Providers[i]
		at := fmt.Sprintf("providers[%d] (%q)", i, p.Name)
		fail := func(format string, args ...interface{}) {
			errs = append(errs, fmt.Errorf("%s: %s", at, fmt.Sprintf(format, args...)))
		}
		if msgs := validation.IsDNS1123Subdomain(p.Name); len(msgs) > 0 {
			fail("name must be a DNS subdomain (it is what ClusterGateways name): %v", msgs)
		}
		if seen[p.Name] {
			fail("name is used twice")
		}
		seen[p.Name] = true
		p.timeout = defaultTimeout
		if p.Timeout != "" {
			d, err := time.ParseDuration(p.Timeout)
			if err != nil || d <= 0 {
				fail("timeout must be a positive duration such as 30s, not %q", p.Timeout)
			}
			p.timeout = d
		}
		e := p.Exec
		switch e.APIVersion {
		case clientauthv1.SchemeGroupVersion.String(), clientauthv1beta1.SchemeGroupVersion.String():
		default:
			fail("exec.apiVersion must be %s or %s, not %q", clientauthv1.SchemeGroupVersion, clientauthv1beta1.SchemeGroupVersion, e.APIVersion)
		}
		if e.InteractiveMode != "" && e.InteractiveMode != clientcmdv1.NeverExecInteractiveMode {
			fail("exec.interactiveMode must be Never or empty: a provider runs without a terminal")
		}
		if !filepath.IsAbs(e.Command) || filepath.Clean(e.Command) != e.Command {
			// It gets no PATH to be looked up in (its environment is only exec.env).
			fail("exec.command must be an absolute, clean path, not %q", e.Command)
		} else if st, err := os.Stat(e.Command); err != nil {
			fail("exec.command: %v", err)
		} else if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
			fail("exec.command %s is not an executable file", e.Command)
		}
		switch p.ProfileSourcedCLIArgsPolicy {
		case "", PolicyIgnore, ArgsPolicyAppend:
		default:
			fail("profileSourcedCLIArgsPolicy must be Append, Ignore or empty, not %q", p.ProfileSourcedCLIArgsPolicy)
		}
		switch p.ProfileSourcedEnvVarsPolicy {
		case "", PolicyIgnore, EnvPolicyAppendIfNotExists:
		case "Replace":
			// A ClusterProfile writer may not override what the operator set (PATH, LD_PRELOAD, ...).
			fail("profileSourcedEnvVarsPolicy Replace would let a ClusterProfile writer override the environment this file sets: the gateway refuses it; use AppendIfNotExists or Ignore")
		default:
			fail("profileSourcedEnvVarsPolicy must be AppendIfNotExists, Ignore or empty, not %q", p.ProfileSourcedEnvVarsPolicy)
		}
		for _, env := range e.Env {
			if env.Name == "" || env.Name == execInfoEnv {
				fail("exec.env must name each variable, and not %s (the gateway sets it)", execInfoEnv)
			}
		}
	}
	return errors.Join(errs...)
}

// execInfoEnv is where client-go passes the ExecCredential to the plugin.
const execInfoEnv = "KUBERNETES_EXEC_INFO"

// provider is a configured provider by name (nil: none).
func (c *Config) provider(name string) *Provider {
	if c == nil {
		return nil
	}
	for i := range c.Providers {
		if c.Providers[i].Name == name {
			return &c.Providers[i]
		}
	}
	return nil
}

// Names are the configured providers' names, for messages.
func (c *Config) Names() []string {
	if c == nil {
		return nil
	}
	out := make([]string, len(c.Providers))
	for i, p := range c.Providers {
		out[i] = p.Name
	}
	return out
}
