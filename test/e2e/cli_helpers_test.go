package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
)

// Helpers for the kubectl-cgw tests: the CLI built from this checkout with
// a known version, run like kubectl, and managed-cluster identities to join with.

// cliVersion is stamped into the test's kubectl-cgw, so --version is checked exactly.
const cliVersion = "v0.0.0-e2e"

var (
	cliOnce sync.Once
	cliDir  string
	cliErr  error
)

// cliBinary builds cmd/kubectl-cgw once per run into a directory that holds
// nothing else, so it can also go on PATH for `kubectl cgw`.
func cliBinary(t *testing.T) string {
	t.Helper()
	cliOnce.Do(func() {
		cliDir = filepath.Join(env.StateDir, "cli-bin")
		if cliErr = os.MkdirAll(cliDir, 0o755); cliErr != nil {
			return
		}
		cliErr = goBuild(filepath.Join("..", ".."), filepath.Join(cliDir, "kubectl-cgw"), "./cmd/kubectl-cgw",
			"-ldflags", "-X github.com/clustergateway/cluster-gateway/pkg/version.Version="+cliVersion)
	})
	if cliErr != nil {
		t.Fatalf("build kubectl-cgw: %v", cliErr)
	}
	return filepath.Join(cliDir, "kubectl-cgw")
}

// goBuild runs `go build -o out [flags] pkg` in dir.
func goBuild(dir, out, pkg string, flags ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	args := append(append([]string{"build", "-o", out}, flags...), pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return nil
}

type cliResult struct {
	Stdout, Stderr string
	Err            error
}

// cgw runs kubectl-cgw against the hub as the user of hubKubeconfig.
func cgw(t *testing.T, hubKubeconfig string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cliBinary(t), append([]string{"--kubeconfig=" + hubKubeconfig}, args...)...)
	// Only the files given: ignore $KUBECONFIG and ~/.kube of whoever runs this.
	cmd.Env = append(os.Environ(), "KUBECONFIG=/dev/null", "HOME="+env.StateDir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("kubectl-cgw %s did not finish: %w", strings.Join(args, " "), ctx.Err())
	}
	return cliResult{Stdout: stdout.String(), Stderr: stderr.String(), Err: err}
}

// mustCgw runs kubectl-cgw and fails unless it succeeds.
func mustCgw(t *testing.T, hubKubeconfig string, args ...string) cliResult {
	t.Helper()
	r := cgw(t, hubKubeconfig, args...)
	if r.Err != nil {
		t.Fatalf("kubectl-cgw %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.Err, r.Stdout, r.Stderr)
	}
	return r
}

// cgwFails runs kubectl-cgw, fails the test if it succeeds, and returns stderr.
func cgwFails(t *testing.T, hubKubeconfig string, args ...string) string {
	t.Helper()
	r := cgw(t, hubKubeconfig, args...)
	var exitErr *exec.ExitError
	if !errors.As(r.Err, &exitErr) {
		t.Fatalf("kubectl-cgw %s: want a failing exit, got err %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.Err, r.Stdout, r.Stderr)
	}
	return r.Stderr
}

// requireNoGateway fails if the ClusterGateway exists (asked through the hub as admin).
func requireNoGateway(t *testing.T, name string) {
	t.Helper()
	_, err := gatewayClient(t, env.Hub.Kubeconfig).GatewayV1alpha1().ClusterGateways().Get(context.Background(), name, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("ClusterGateway %s: want NotFound, got err %v", name, err)
	}
}

// deleteGatewayAtEnd deletes the ClusterGateway when the test ends.
func deleteGatewayAtEnd(t *testing.T, name string) {
	t.Helper()
	c := gatewayClient(t, env.Hub.Kubeconfig)
	t.Cleanup(func() {
		err := c.GatewayV1alpha1().ClusterGateways().Delete(context.Background(), name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete ClusterGateway %s: %v", name, err)
		}
	})
}

// saIdentity is a ServiceAccount on a managed cluster with a ClusterRole, and
// TokenRequest tokens for it: the identity a token kubeconfig carries.
type saIdentity struct {
	cs              kubernetes.Interface
	namespace, name string
}

// newSAIdentity creates ServiceAccount name in default on c, bound to
// clusterRole, and removes both when the test ends.
func newSAIdentity(t *testing.T, c *localenv.Cluster, name, clusterRole string) *saIdentity {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ServiceAccount %s on %s: %v", name, c.Name, err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: "default"}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("bind ServiceAccount %s on %s: %v", name, c.Name, err)
	}
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
		_ = cs.CoreV1().ServiceAccounts("default").Delete(ctx, name, metav1.DeleteOptions{})
	})
	return &saIdentity{cs: cs, namespace: "default", name: name}
}

// token asks the managed cluster for a new token of the ServiceAccount.
func (s *saIdentity) token(t *testing.T) string {
	t.Helper()
	ttl := int64(3600)
	tr, err := s.cs.CoreV1().ServiceAccounts(s.namespace).CreateToken(context.Background(), s.name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s: %v", s.name, err)
	}
	return tr.Status.Token
}

// clusterKubeconfig writes a kubeconfig for managed cluster c with the given
// user entry (context and current-context "ctx"), as its owner would hand it over.
func clusterKubeconfig(t *testing.T, c *localenv.Cluster, server string, user *clientcmdapi.AuthInfo) string {
	t.Helper()
	if server == "" {
		server = c.URL
	}
	return kubeconfigFile(t, "", server, c.CA.CertPEM, user)
}

// execPluginSource is a client-go exec credential plugin: it prints the token
// in the file named by its first argument, and appends a line to the file
// named by its second, so the test sees that it ran.
const execPluginSource = `package main

import (
	"fmt"
	"os"
	"strings"
)

func main() {
	token, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	f, err := os.OpenFile(os.Args[2], os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Fprintln(f, "called")
	f.Close()
	fmt.Printf("{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":%q}}\n", strings.TrimSpace(string(token)))
}
`

// buildExecPlugin builds the test exec plugin (standard library only) and returns its path.
func buildExecPlugin(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{"main.go": execPluginSource, "go.mod": "module execplugin\n\ngo 1.26\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "e2e-exec-plugin")
	if err := goBuild(dir, out, "."); err != nil {
		t.Fatal(err)
	}
	return out
}

// callsOf counts the exec plugin's runs recorded in log.
func callsOf(log string) int {
	b, _ := os.ReadFile(log)
	return strings.Count(string(b), "called\n")
}

// noServiceAccount fails if ServiceAccount ns/name or the ClusterRoleBinding
// join makes for it exists on c.
func noServiceAccount(t *testing.T, c *localenv.Cluster, ns, name string) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Get(context.Background(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ServiceAccount %s/%s on %s: want NotFound, got err %v", ns, name, c.Name, err)
	}
	crb := "cluster-gateway:" + ns + ":" + name
	if _, err := cs.RbacV1().ClusterRoleBindings().Get(context.Background(), crb, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ClusterRoleBinding %s on %s: want NotFound, got err %v", crb, c.Name, err)
	}
}

// removeJoinServiceAccountAtEnd deletes what join --service-account made on c.
func removeJoinServiceAccountAtEnd(t *testing.T, c *localenv.Cluster, ns, name string) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = cs.RbacV1().ClusterRoleBindings().Delete(ctx, "cluster-gateway:"+ns+":"+name, metav1.DeleteOptions{})
		_ = cs.CoreV1().ServiceAccounts(ns).Delete(ctx, name, metav1.DeleteOptions{})
	})
}
