package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

// TestCLIKubeconfigListAndPlugin: `kubeconfig --all` writes one context per
// cluster, through the hub, with the hub's own user and nothing else;
// `list` shows the gateways; the binary is a kubectl plugin with a version.
func TestCLIKubeconfigListAndPlugin(t *testing.T) {
	requireGateway(t)
	hub := env.Hub.Kubeconfig
	m1, m2 := env.Managed[0], env.Managed[1]
	one, two := uniqueName(t, "cli-kc-one"), uniqueName(t, "cli-kc-two")
	for _, j := range []struct{ name, kubeconfig string }{{one, m1.Kubeconfig}, {two, m2.Kubeconfig}} {
		deleteGatewayAtEnd(t, j.name)
		mustCgw(t, hub, "join", j.name, "--cluster-kubeconfig", j.kubeconfig)
	}
	label := uniqueName(t, "team")
	mustKubectl(t, hub, "label", "clustergateway", two, "team="+label)

	t.Run("list", func(t *testing.T) {
		out := mustCgw(t, hub, "list").Stdout
		header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
		if strings.Join(header[:5], " ") != "NAME ENDPOINT ADDRESS CREDENTIAL READY" {
			t.Fatalf("list header %v", header)
		}
		for name, m := range map[string]string{one: m1.URL, two: m2.URL} {
			row := tableRow(out, name)
			if len(row) < 5 || row[1] != "Direct" || row[2] != m || row[3] != "X509Certificate" || row[4] != "True" {
				t.Errorf("list row for %s: %v; want Direct %s X509Certificate True", name, row, m)
			}
		}
		out = mustCgw(t, hub, "list", "-l", "team="+label).Stdout
		if !strings.Contains(out, two) || strings.Contains(out, one) {
			t.Errorf("list -l team=%s:\n%s\nwant only %s", label, out, two)
		}
	})

	t.Run("kubeconfig --all", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "all.kubeconfig")
		mustCgw(t, hub, "kubeconfig", "--all", "-o", p)
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v; want 0600", p, err, fi.Mode())
		}
		kc, err := clientcmd.LoadFromFile(p)
		if err != nil {
			t.Fatal(err)
		}
		hubCfg, err := clientcmd.LoadFromFile(hub)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{one, two, "cluster-1"} {
			c, ok := kc.Contexts[name]
			if !ok {
				t.Errorf("no context %s in %v", name, keysOf(kc.Contexts))
				continue
			}
			want := env.Hub.URL + "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/" + name + "/proxy"
			if got := kc.Clusters[c.Cluster].Server; got != want {
				t.Errorf("context %s: server %s, want %s", name, got, want)
			}
		}
		// The hub context's user, as it is: no credential minted.
		if len(kc.AuthInfos) != 1 {
			t.Errorf("users %v, want only the hub's", keysOf(kc.AuthInfos))
		}
		for n, u := range kc.AuthInfos {
			hu, ok := hubCfg.AuthInfos[n]
			if !ok || string(u.ClientCertificateData) != string(hu.ClientCertificateData) || string(u.ClientKeyData) != string(hu.ClientKeyData) || u.Token != "" {
				t.Errorf("user %s is not the hub kubeconfig's user %s", n, n)
			}
		}
		res := kubectl(t, p, nil, "", "--context", two, "exec", "demo", "--", "hostname")
		if res.Err != nil || strings.TrimSpace(res.Stdout) != m2.Name {
			t.Errorf("exec through context %s: %q, err %v, stderr %s; want %s", two, res.Stdout, res.Err, res.Stderr, m2.Name)
		}
		if out := mustKubectl(t, p, "--context", one, "get", "nodes", "-o", "name"); !strings.Contains(out, "node/fake-node") {
			t.Errorf("get nodes through context %s: %q", one, out)
		}

		before, _ := os.ReadFile(p)
		stderr := cgwFails(t, hub, "kubeconfig", one, "-o", p)
		if !strings.Contains(stderr, p+" exists: pass --overwrite") {
			t.Errorf("writing over an existing file: %q", stderr)
		}
		if after, _ := os.ReadFile(p); string(after) != string(before) {
			t.Errorf("the refused write changed %s", p)
		}
		mustCgw(t, hub, "kubeconfig", one, "-o", p, "--overwrite")
		if kc, err := clientcmd.LoadFromFile(p); err != nil || len(kc.Contexts) != 1 || kc.CurrentContext != one {
			t.Errorf("--overwrite: %v contexts, current %q, err %v; want only %s", len(kc.Contexts), kc.CurrentContext, err, one)
		}
	})

	t.Run("kubeconfig on stdout; unknown cluster", func(t *testing.T) {
		out := mustCgw(t, hub, "kubeconfig", one).Stdout
		kc, err := clientcmd.Load([]byte(out))
		if err != nil || kc.CurrentContext != one {
			t.Fatalf("stdout is not a kubeconfig for %s: %v\n%s", one, err, out)
		}
		stderr := cgwFails(t, hub, "kubeconfig", "no-such-cluster")
		if !strings.Contains(stderr, `there is no ClusterGateway "no-such-cluster" on the hub`) {
			t.Errorf("unknown cluster: %q", stderr)
		}
	})

	t.Run("user without the proxy permission is warned", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "bob.kubeconfig")
		r := mustCgw(t, env.Bob.Kubeconfig, "kubeconfig", one, "-o", p)
		if !strings.Contains(r.Stderr, "does not let you use clustergateways/proxy") {
			t.Errorf("bob (viewer) was not warned: %q", r.Stderr)
		}
		stderr := kubectlFails(t, p, "get", "pods")
		if !strings.Contains(stderr, "forbidden") || !strings.Contains(stderr, `User "bob"`) {
			t.Errorf("bob through the gateway: %q; want the hub's Forbidden", stderr)
		}
	})

	t.Run("kubectl plugin and version", func(t *testing.T) {
		bin := cliBinary(t)
		r := mustCgw(t, hub, "--version")
		if !regexp.MustCompile(`^kubectl-cgw ` + regexp.QuoteMeta(cliVersion) + ` go1\.\d+`).MatchString(r.Stdout) {
			t.Errorf("--version printed %q, want kubectl-cgw %s and the Go version", r.Stdout, cliVersion)
		}
		// kubectl takes no flags before a plugin's name: they go after it.
		plugin := func(args ...string) kubectlResult {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, env.KubectlPath(), args...)
			cmd.Env = append(os.Environ(), "KUBECONFIG="+hub, "HOME="+env.StateDir,
				"PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			return kubectlResult{Stdout: stdout.String(), Stderr: stderr.String(), Err: err}
		}
		res := plugin("plugin", "list")
		if !strings.Contains(res.Stdout, bin) {
			t.Errorf("kubectl plugin list: %q (stderr %q), want %s", res.Stdout, res.Stderr, bin)
		}
		res = plugin("cgw", "list", "--kubeconfig", hub)
		if res.Err != nil || len(tableRow(res.Stdout, one)) == 0 {
			t.Errorf("kubectl cgw list: err %v, stdout %q, stderr %q", res.Err, res.Stdout, res.Stderr)
		}
		res = plugin("cgw", "join", "--help")
		if !strings.Contains(res.Stdout, "kubectl cgw join NAME (--cluster-kubeconfig FILE | --credential-secret NAMESPACE/NAME | --credential-provider NAME)") || !strings.Contains(res.Stdout, "Examples:") {
			t.Errorf("kubectl cgw join --help: %q", res.Stdout)
		}
	})
}

func keysOf[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
