package credentials

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func writeConfig(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "providers")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLoadConfigBothFormats: a SIG-Multicluster provider file (JSON, as
// cluster-inventory-api reads it, or YAML) gives the same providers as the
// CredentialProviderConfig that says the same.
func TestLoadConfigBothFormats(t *testing.T) {
	cmd := script(t, t.TempDir(), "plugin", "exit 0")
	own := `apiVersion: gateway.clustergateway.io/v1alpha1
kind: CredentialProviderConfig
providers:
- name: cluster-gateway
  timeout: 5s
  exec:
    apiVersion: client.authentication.k8s.io/v1
    command: ` + cmd + `
    args: [credential, --token-file, /var/run/secrets/hub/token]
    env: [{name: A, value: b}]
`
	sigJSON := `{"providers": [{"name": "cluster-gateway", "timeout": "5s", "execConfig": {
  "apiVersion": "client.authentication.k8s.io/v1", "command": "` + cmd + `",
  "args": ["credential", "--token-file", "/var/run/secrets/hub/token"],
  "env": [{"name": "A", "value": "b"}], "provideClusterInfo": true, "interactiveMode": "Never"}}]}`
	want, err := LoadConfig(writeConfig(t, own), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got, err := LoadConfig(writeConfig(t, sigJSON), time.Minute)
	if err != nil {
		t.Fatalf("SIG-Multicluster provider file: %v", err)
	}
	gp, wp := got.Providers[0], want.Providers[0]
	if gp.Name != wp.Name || gp.timeout != 5*time.Second || gp.Exec.Command != wp.Exec.Command ||
		!reflect.DeepEqual(gp.Exec.Args, wp.Exec.Args) || !reflect.DeepEqual(gp.Exec.Env, wp.Exec.Env) || gp.Exec.APIVersion != wp.Exec.APIVersion {
		t.Errorf("SIG-Multicluster file gave %+v, want %+v", gp, wp)
	}
	if !reflect.DeepEqual(got.Names(), []string{"cluster-gateway"}) {
		t.Errorf("names %v", got.Names())
	}
	// The same file with the KEP-5339 policies other consumers read.
	withPolicies := strings.Replace(sigJSON, `"timeout": "5s",`, `"profileSourcedCLIArgsPolicy": "Append", "profileSourcedEnvVarsPolicy": "AppendIfNotExists",`, 1)
	if c, err := LoadConfig(writeConfig(t, withPolicies), time.Minute); err != nil {
		t.Errorf("with KEP-5339 policies: %v", err)
	} else if p := c.Providers[0]; p.ProfileSourcedCLIArgsPolicy != ArgsPolicyAppend || p.ProfileSourcedEnvVarsPolicy != EnvPolicyAppendIfNotExists {
		t.Errorf("the policies read are %q and %q, want Append and AppendIfNotExists", p.ProfileSourcedCLIArgsPolicy, p.ProfileSourcedEnvVarsPolicy)
	}
}

// TestLoadConfigRefuses: each format is checked as strictly as the other,
// and the error names what to fix.
func TestLoadConfigRefuses(t *testing.T) {
	cmd := script(t, t.TempDir(), "plugin", "exit 0")
	for name, c := range map[string]struct{ content, want string }{
		"relative command": {`{"providers":[{"name":"p","execConfig":{"apiVersion":"client.authentication.k8s.io/v1","command":"kubectl-cgw"}}]}`, "absolute, clean path"},
		"unknown field":    {`{"providers":[{"name":"p","exec":{"command":"` + cmd + `"}}]}`, "SIG-Multicluster provider file"},
		"no apiVersion":    {`{"providers":[{"name":"p","execConfig":{"command":"` + cmd + `"}}]}`, "exec.apiVersion must be"},
		"env Replace": {`{"providers":[{"name":"p","profileSourcedEnvVarsPolicy":"Replace","execConfig":{"apiVersion":"client.authentication.k8s.io/v1","command":"` + cmd + `","env":[{"name":"PATH","value":"/bin"}]}}]}`,
			"override the environment this file sets"},
		"args policy":     {`{"providers":[{"name":"p","profileSourcedCLIArgsPolicy":"Prepend","execConfig":{"apiVersion":"client.authentication.k8s.io/v1","command":"` + cmd + `"}}]}`, "profileSourcedCLIArgsPolicy must be"},
		"own kind wrong":  {"apiVersion: v1\nkind: Config\nproviders: []\n", "apiVersion and kind must be"},
		"own, execConfig": {"apiVersion: gateway.clustergateway.io/v1alpha1\nkind: CredentialProviderConfig\nproviders:\n- name: p\n  execConfig: {}\n", "not a CredentialProviderConfig"},
		"not a mapping":   {"- a\n- b\n", "neither"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := LoadConfig(writeConfig(t, c.content), time.Minute)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err %v, want one saying %q", err, c.want)
			}
		})
	}
}

// TestLoadConfigDocsProviderFile: the provider file line docs/install.md
// tells consumers to add is one the gateway's --credential-providers-file
// reads as it is (only the command's path is this machine's).
func TestLoadConfigDocsProviderFile(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- recipe: provider-file -->\n```json\n(.*?)```\n").FindSubmatch(raw)
	if m == nil {
		t.Fatal("docs/install.md has no provider-file recipe")
	}
	cmd := script(t, t.TempDir(), "kubectl-cgw", "exit 0")
	c, err := LoadConfig(writeConfig(t, strings.ReplaceAll(string(m[1]), "/usr/local/bin/kubectl-cgw", cmd)), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if p := c.provider("cluster-gateway"); p == nil || p.Exec.Command != cmd || len(p.Exec.Args) == 0 || p.Exec.Args[0] != "credential" {
		t.Errorf("providers %+v, want cluster-gateway running %s credential", c.Providers, cmd)
	}
}

// TestLoadConfigDocsPolicies: the provider file with KEP-5339's policies
// that docs/install.md shows loads, with those policies, and a gateway's
// additional args and environment reach its provider as they say.
func TestLoadConfigDocsPolicies(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- recipe: provider-file-policies -->\n```json\n(.*?)```\n").FindSubmatch(raw)
	if m == nil {
		t.Fatal("docs/install.md has no provider-file-policies recipe")
	}
	file := strings.ReplaceAll(string(m[1]), "/usr/local/bin/aws-iam-authenticator", providerBin)
	file = strings.Replace(file, `"env": [`, `"env": [{"name": "PROVIDER_TOKEN_ECHO", "value": "1"}, `, 1)
	c, err := LoadConfig(writeConfig(t, file), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	p := c.provider("eks")
	if p == nil || p.ProfileSourcedCLIArgsPolicy != ArgsPolicyAppend || p.ProfileSourcedEnvVarsPolicy != EnvPolicyAppendIfNotExists {
		t.Fatalf("providers %+v, want eks with Append and AppendIfNotExists", c.Providers)
	}
	ps, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ps.Close(); err != nil {
			t.Error(err)
		}
	})
	r := ranOf(t, ps, &Cluster{Gateway: "gw", Provider: "eks", Server: "https://10.0.0.1",
		AdditionalArgs: []string{"--cluster-name", "prod"},
		AdditionalEnv:  []EnvVar{{"AWS_REGION", "eu-west-1"}, {"AWS_CONFIG_FILE", "/tmp/attacker"}}})
	if !slices.Equal(r.Args, []string{"token", "--cluster-name", "prod"}) || r.Env["AWS_REGION"] != "eu-west-1" || r.Env["AWS_CONFIG_FILE"] != "/etc/aws/config" {
		t.Errorf("the provider ran with args %q and env %v; want the file's then the gateway's args, AWS_REGION added, AWS_CONFIG_FILE the file's", r.Args, r.Env)
	}
}
