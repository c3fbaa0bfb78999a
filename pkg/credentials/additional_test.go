package credentials

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"
)

// ran is what the test provider ran with (PROVIDER_TOKEN_ECHO): its args
// and environment, as it printed them into its token.
type ran struct {
	Args []string          `json:"args"`
	Env  map[string]string `json:"env"`
}

func ranOf(t *testing.T, p *Providers, c *Cluster) ran {
	t.Helper()
	st, err := p.Get(context.Background(), c)
	if err != nil || st == nil || st.Problem != "" {
		t.Fatalf("Get(%s) = %+v, %v", c.Gateway, st, err)
	}
	var r ran
	if err := json.Unmarshal([]byte(st.Token), &r); err != nil {
		t.Fatalf("the provider's token %q: %v", st.Token, err)
	}
	return r
}

// echoProvider runs the test provider with args --from-file and the
// variables FILE_VAR and SHARED, under the given KEP-5339 policies.
func echoProvider(name, argsPolicy, envPolicy string) Provider {
	e := execOf(providerBin, envVar("PROVIDER_TOKEN_ECHO", "1"), envVar("FILE_VAR", "file"), envVar("SHARED", "from-file"))
	e.Args = []string{"--from-file"}
	return Provider{Name: name, Exec: e, ProfileSourcedCLIArgsPolicy: argsPolicy, ProfileSourcedEnvVarsPolicy: envPolicy}
}

// A gateway's additional args and environment reach the provider only as
// the providers file's policies allow: Append puts the args after the
// file's; AppendIfNotExists adds the variables the file does not set (the
// file's value wins) and never a reserved one (LD_PRELOAD here: the API
// refuses it, and the launcher drops it anyway); Ignore or no policy drops
// both.
func TestAdditionalArgsAndEnvFollowThePolicies(t *testing.T) {
	p := providers(t, 10*time.Second,
		echoProvider("none", "", ""),
		echoProvider("ignore", PolicyIgnore, PolicyIgnore),
		echoProvider("args", ArgsPolicyAppend, ""),
		echoProvider("both", ArgsPolicyAppend, EnvPolicyAppendIfNotExists))
	extra := func(gw, provider string) *Cluster {
		return &Cluster{Gateway: gw, Provider: provider, Server: "https://10.0.0.1",
			AdditionalArgs: []string{"--cluster", "prod ; rm -rf /"},
			AdditionalEnv:  []EnvVar{{"SHARED", "from-profile"}, {"EXTRA", "x"}, {"LD_PRELOAD", "/tmp/evil.so"}}}
	}
	fileArgs, allArgs := []string{"--from-file"}, []string{"--from-file", "--cluster", "prod ; rm -rf /"}
	for _, tc := range []struct {
		provider string
		args     []string
		extraEnv bool
	}{
		{"none", fileArgs, false},
		{"ignore", fileArgs, false},
		{"args", allArgs, false},
		{"both", allArgs, true},
	} {
		r := ranOf(t, p, extra("gw-"+tc.provider, tc.provider))
		if !slices.Equal(r.Args, tc.args) {
			t.Errorf("%s: the provider ran with args %q, want %q", tc.provider, r.Args, tc.args)
		}
		if r.Env["SHARED"] != "from-file" || r.Env["FILE_VAR"] != "file" {
			t.Errorf("%s: SHARED=%q FILE_VAR=%q, want the file's values", tc.provider, r.Env["SHARED"], r.Env["FILE_VAR"])
		}
		if _, ok := r.Env["LD_PRELOAD"]; ok {
			t.Errorf("%s: the provider ran with LD_PRELOAD", tc.provider)
		}
		if got, ok := r.Env["EXTRA"]; ok != tc.extraEnv || (ok && got != "x") {
			t.Errorf("%s: EXTRA=%q (set: %v), want set: %v", tc.provider, got, ok, tc.extraEnv)
		}
		if len(r.Env) != 3+btoi(tc.extraEnv) { // PROVIDER_TOKEN_ECHO, FILE_VAR, SHARED, [EXTRA]: nothing else
			t.Errorf("%s: the provider's environment is %v", tc.provider, r.Env)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// New additional args are a new credential: the provider runs again with
// them, rather than the gateway keeping the credential minted for the old.
func TestChangedAdditionalArgsRunTheProviderAgain(t *testing.T) {
	p := providers(t, 10*time.Second, echoProvider("p", ArgsPolicyAppend, EnvPolicyAppendIfNotExists))
	c := &Cluster{Gateway: "gw", Provider: "p", Server: "https://10.0.0.1", AdditionalArgs: []string{"--cluster", "a"}}
	if r := ranOf(t, p, c); !slices.Equal(r.Args, []string{"--from-file", "--cluster", "a"}) {
		t.Fatalf("args %q", r.Args)
	}
	c2 := *c
	c2.AdditionalArgs = []string{"--cluster", "b"}
	if r := ranOf(t, p, &c2); !slices.Equal(r.Args, []string{"--from-file", "--cluster", "b"}) {
		t.Errorf("after the args changed the provider's credential is from args %q, want --cluster b", r.Args)
	}
	c3 := c2
	c3.AdditionalEnv = []EnvVar{{"REGION", "eu"}}
	if r := ranOf(t, p, &c3); r.Env["REGION"] != "eu" {
		t.Errorf("after the env changed the provider's credential is from env %v, want REGION=eu", r.Env)
	}
}

// A reload that changes only a provider's policy gives its gateways the
// new policy: Ignore, then Append, lets the args through.
func TestReloadOfAPolicyAppliesIt(t *testing.T) {
	p := providers(t, 10*time.Second, echoProvider("p", PolicyIgnore, PolicyIgnore))
	c := &Cluster{Gateway: "gw", Provider: "p", Server: "https://10.0.0.1", AdditionalArgs: []string{"--cluster", "a"}}
	if r := ranOf(t, p, c); !slices.Equal(r.Args, []string{"--from-file"}) {
		t.Fatalf("under Ignore the args were %q", r.Args)
	}
	cfg := &Config{APIVersion: ConfigAPIVersion, Kind: ConfigKind, Providers: []Provider{echoProvider("p", ArgsPolicyAppend, PolicyIgnore)}}
	if err := cfg.validate(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if changed := p.Reload(cfg); !slices.Equal(changed, []string{"gw"}) {
		t.Errorf("a policy change changed %v, want gw", changed)
	}
	if r := ranOf(t, p, c); !slices.Equal(r.Args, []string{"--from-file", "--cluster", "a"}) {
		t.Errorf("after the reload to Append the args were %q", r.Args)
	}
}
