package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// countingProviderScript is providerScript that also appends a line to
// $CALLS on each run.
const countingProviderScript = `#!/bin/sh
echo run >> "$CALLS"
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s"}}' "$(/bin/cat "$TOKEN_FILE")"
`

// TestProvidersFileReload runs the gateway with a SIG-Multicluster provider
// file as --credential-providers-file and rewrites it while it runs: the
// gateway of the changed provider uses the new one without a restart, the
// other gateway's provider is not run again, an exec session open through
// the changed gateway stays open and carries data across the reload, and a
// bad file keeps the last good configuration, logged and counted. It
// restarts the gateway, so it does not run in parallel.
func TestProvidersFileReload(t *testing.T) {
	requireGateway(t)
	ctx := context.Background()
	direct := managedClient(t, 0)
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p+".tmp", []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(p+".tmp", p); err != nil { // as a ConfigMap update swaps it
			t.Fatal(err)
		}
		return p
	}
	script := write("provider", countingProviderScript, 0o755)
	tokens := map[string]string{}
	for _, sa := range []string{"a1", "a2", "b"} {
		name := uniqueName(t, "reload-"+sa)
		tokens[sa] = write(sa+".token", providerServiceAccount(t, direct, name), 0o600)
		tokens[sa+"-user"] = "system:serviceaccount:default:" + name
	}
	callsB := filepath.Join(dir, "calls-b")
	file := func(aToken string) string {
		entry := func(name, token, calls string) string {
			return fmt.Sprintf(`{"name": %q, "execConfig": {"apiVersion": "client.authentication.k8s.io/v1", "command": %q, "env": [{"name": "TOKEN_FILE", "value": %q}, {"name": "CALLS", "value": %q}]}}`, name, script, token, calls)
		}
		return `{"providers": [` + entry("reload-a", aToken, filepath.Join(dir, "calls-a")) + ", " + entry("reload-b", tokens["b"], callsB) + "]}\n"
	}
	providers := write("providers.json", file(tokens["a1"]), 0o600)
	restartGateway(t, append(append([]string{}, env.GatewayArgs...), "--credential-providers-file="+providers, "--credential-providers-reload-interval=1s"))
	t.Cleanup(func() { restartGateway(t, nil) })

	gw := map[string]string{}
	for _, p := range []string{"reload-a", "reload-b"} {
		gw[p] = uniqueName(t, p)
		g := directGateway(gw[p], 0)
		g.Spec.Credential = gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialProvider, Provider: &gatewayv1alpha1.ProviderReference{Name: p}}
		createGateway(t, g)
	}
	seen := func(p string) (string, error) {
		cfg, _ := viaHub(t, gw[p])
		cs, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
		if err != nil {
			return "", err
		}
		return seenUser(ctx, cs)
	}
	expectUser := func(p, want string) {
		t.Helper()
		eventually(t, gw[p]+" reaching managed-1 as "+want, func() error {
			u, err := seen(p)
			if err == nil && u != want {
				err = fmt.Errorf("managed-1 sees %s", u)
			}
			return err
		})
	}
	expectUser("reload-a", tokens["a1-user"])
	expectUser("reload-b", tokens["b-user"])
	runsB := func() int {
		raw, _ := os.ReadFile(callsB)
		return strings.Count(string(raw), "run")
	}
	before := runsB()

	stream := startExecStream(t, viaHubKubeconfig(t, gw["reload-a"]), streamProtocols[0])
	defer stream.kill()

	// Provider reload-a now gives another identity; reload-b is unchanged.
	write("providers.json", file(tokens["a2"]), 0o600)
	expectUser("reload-a", tokens["a2-user"])
	if err := stream.echo("after-reload"); err != nil {
		t.Errorf("the exec session opened before the reload: %v\nkubectl stderr:\n%s", err, stream.stderr)
	}
	if u, err := seen("reload-b"); err != nil || u != tokens["b-user"] {
		t.Errorf("reload-b after the reload: %s %v, want %s", u, err, tokens["b-user"])
	}
	if after := runsB(); after != before {
		t.Errorf("reload-b's provider ran %d times more after a reload that did not change it, want 0", after-before)
	}

	// A bad file: the last good configuration stays, logged and counted.
	failuresBefore := gatewayMetrics(t)[`cluster_gateway_credential_providers_file_reloads_total{result="failure"}`]
	write("providers.json", `{"providers": [{"name": "reload-a", "execConfig": {"command": "relative"}}]}`, 0o600)
	eventually(t, "the bad file counted", func() error {
		m := gatewayMetrics(t)
		if m[`cluster_gateway_credential_providers_file_reloads_total{result="failure"}`] <= failuresBefore || m["cluster_gateway_credential_providers_file_last_reload_successful"] != 0 {
			return fmt.Errorf("reloads failure %v, last successful %v", m[`cluster_gateway_credential_providers_file_reloads_total{result="failure"}`], m["cluster_gateway_credential_providers_file_last_reload_successful"])
		}
		return nil
	})
	logs := env.GatewayLogs()
	raw, err := os.ReadFile(logs[0])
	if err != nil || !strings.Contains(string(raw), "is not valid: keeping the last good configuration") {
		t.Errorf("the gateway's log (%v) does not say the bad file was refused", err)
	}
	expectUser("reload-a", tokens["a2-user"])
	if u, err := seen("reload-b"); err != nil || u != tokens["b-user"] {
		t.Errorf("reload-b with a bad file: %s %v, want %s", u, err, tokens["b-user"])
	}
	if err := stream.echo("after-bad-file"); err != nil {
		t.Errorf("the exec session after the bad file: %v", err)
	}
}
