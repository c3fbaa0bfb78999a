package app

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// writeFiles writes name → content under dir and returns dir.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const kubeconfigTemplate = `apiVersion: v1
kind: Config
current-context: cert
clusters:
- name: c
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority: ca.crt
    tls-server-name: api.internal
    proxy-url: http://proxy.internal:3128
users:
- name: cert-user
  user:
    client-certificate: client.crt
    client-key: client.key
- name: token-user
  user:
    tokenFile: token
- name: exec-user
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: aws-iam-authenticator
      interactiveMode: Never
- name: provider-user
  user:
    auth-provider:
      name: oidc
- name: basic-user
  user:
    username: admin
    password: secret
- name: nothing-user
  user: {}
contexts:
- {name: cert, context: {cluster: c, user: cert-user}}
- {name: token, context: {cluster: c, user: token-user}}
- {name: exec, context: {cluster: c, user: exec-user}}
- {name: provider, context: {cluster: c, user: provider-user}}
- {name: basic, context: {cluster: c, user: basic-user}}
- {name: nothing, context: {cluster: c, user: nothing-user}}
`

// clientCert is a PEM client certificate valid from notBefore to notAfter, and its key.
func clientCert(t *testing.T, notBefore, notAfter time.Time) (string, string) {
	t.Helper()
	c := testpki.MustCA(t, "ca").MustIssue(t, testpki.Spec{CommonName: "u", Client: true, NotBefore: notBefore, NotAfter: notAfter})
	return string(c.CertPEM), string(c.KeyPEM)
}

func sourceDirWith(t *testing.T, notBefore, notAfter time.Time) string {
	crt, key := clientCert(t, notBefore, notAfter)
	return writeFiles(t, map[string]string{
		"kubeconfig": kubeconfigTemplate,
		"ca.crt":     "CA PEM",
		"client.crt": crt,
		"client.key": key,
		"token":      "tok-123\n",
	})
}

func sourceDir(t *testing.T) string {
	return sourceDirWith(t, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
}

func TestSourceCredentials(t *testing.T) {
	dir := sourceDir(t)
	// From another working directory: relative paths are the kubeconfig's.
	t.Chdir(t.TempDir())
	file := filepath.Join(dir, "kubeconfig")

	src, err := loadSource(file, "")
	if err != nil {
		t.Fatal(err)
	}
	cred, err := src.credential()
	if err != nil {
		t.Fatal(err)
	}
	crt, _ := os.ReadFile(filepath.Join(dir, "client.crt"))
	key, _ := os.ReadFile(filepath.Join(dir, "client.key"))
	if cred.Type != gatewayv1alpha1.CredentialX509Certificate || string(cred.X509.Certificate) != string(crt) || string(cred.X509.PrivateKey) != string(key) {
		t.Errorf("current context cert: got %+v", cred)
	}
	ep := src.endpoint("", "", false)
	if ep.Type != gatewayv1alpha1.EndpointDirect || ep.Address != "https://10.0.0.1:6443" || string(ep.CABundle) != "CA PEM" ||
		ep.ServerName != "api.internal" || ep.ProxyURL != "http://proxy.internal:3128" {
		t.Errorf("endpoint: %+v", ep)
	}
	ep = src.endpoint("https://edge.internal:443", "kubernetes.default.svc", true)
	if ep.Type != gatewayv1alpha1.EndpointKonnectivity || ep.Address != "https://edge.internal:443" || ep.ProxyURL != "" ||
		string(ep.CABundle) != "CA PEM" || ep.ServerName != "kubernetes.default.svc" {
		t.Errorf("konnectivity endpoint: %+v", ep)
	}

	src, err = loadSource(file, "token")
	if err != nil {
		t.Fatal(err)
	}
	if cred, err = src.credential(); err != nil || cred.Type != gatewayv1alpha1.CredentialBearerToken || cred.BearerToken != "tok-123" || cred.X509 != nil {
		t.Errorf("token context: got %+v, %v; want BearerToken tok-123 from the token file", cred, err)
	}

	for ctx, want := range map[string]string{
		"exec":     `exec plugin "aws-iam-authenticator"`,
		"provider": `auth provider "oidc"`,
		"basic":    "username and password",
		"nothing":  "no client certificate or token",
	} {
		src, err := loadSource(file, ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = src.credential()
		var needs *errNeedsServiceAccount
		if !errors.As(err, &needs) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--service-account --cluster-role") {
			t.Errorf("context %s: err %v; want one naming %q and offering --service-account --cluster-role", ctx, err, want)
		}
	}
}

func TestSourceRefusesCertificatesOutsideTheirValidity(t *testing.T) {
	now := time.Now()
	for want, dir := range map[string]string{
		"expired at":          sourceDirWith(t, now.Add(-2*time.Hour), now.Add(-time.Hour)),
		"is not valid before": sourceDirWith(t, now.Add(time.Hour), now.Add(2*time.Hour)),
	} {
		src, err := loadSource(filepath.Join(dir, "kubeconfig"), "cert")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := src.credential(); err == nil || !strings.Contains(err.Error(), "client certificate of user") || !strings.Contains(err.Error(), want) {
			t.Errorf("err %v, want the certificate refused as %q", err, want)
		}
	}
}

func TestSourceErrors(t *testing.T) {
	dir := sourceDir(t)
	garbage := filepath.Join(writeFiles(t, map[string]string{"garbage": "{{{ not yaml"}), "garbage")
	for _, c := range []struct{ file, context, want string }{
		{"", "", "--cluster-kubeconfig is required"},
		{filepath.Join(dir, "missing"), "", "no such file"},
		{garbage, "", "cannot read the cluster's kubeconfig " + garbage},
		{filepath.Join(dir, "kubeconfig"), "nope", `context "nope" not found in ` + filepath.Join(dir, "kubeconfig") + `: choose one of "basic", "cert", "exec"`},
	} {
		if _, err := loadSource(c.file, c.context); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("loadSource(%q, %q): err %v, want it to contain %q", c.file, c.context, err, c.want)
		}
	}
}

func TestJoinFlagValidation(t *testing.T) {
	base := func() *joinOptions {
		return &joinOptions{sa: serviceAccountOptions{duration: time.Hour}}
	}
	o := base()
	o.serviceAccount = true
	if err := o.validate(); err == nil || !strings.Contains(err.Error(), "--service-account needs --cluster-role") || !strings.Contains(err.Error(), "no default") {
		t.Errorf("--service-account alone: %v", err)
	}
	o = base()
	o.sa.clusterRole = "view"
	if err := o.validate(); err == nil || !strings.Contains(err.Error(), "only applies with --service-account") {
		t.Errorf("--cluster-role alone: %v", err)
	}
	o = base()
	o.serviceAccount, o.sa.clusterRole, o.sa.duration = true, "view", time.Minute
	if err := o.validate(); err == nil || !strings.Contains(err.Error(), "at least 10m") {
		t.Errorf("short token: %v", err)
	}
	o = base()
	o.impersonation = "caller"
	if err := o.validate(); err == nil || !strings.Contains(err.Error(), "None or Caller") {
		t.Errorf("bad impersonation: %v", err)
	}
	o = base()
	o.serviceAccount, o.sa.clusterRole, o.impersonation = true, "view", "Caller"
	if err := o.validate(); err != nil {
		t.Errorf("valid flags: %v", err)
	}
}

func TestPrintList(t *testing.T) {
	gw := func(name string, conds ...metav1.Condition) gatewayv1alpha1.ClusterGateway {
		return gatewayv1alpha1.ClusterGateway{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: gatewayv1alpha1.ClusterGatewaySpec{
				Endpoint:   gatewayv1alpha1.Endpoint{Address: "https://" + name + ":6443"},
				Credential: gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialBearerToken},
			},
			Status: gatewayv1alpha1.ClusterGatewayStatus{Conditions: conds},
		}
	}
	ready := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Valid"}
	var out bytes.Buffer
	if err := printList(&out, []gatewayv1alpha1.ClusterGateway{gw("a", ready), gw("b", metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "CredentialExpired"})}); err != nil {
		t.Fatal(err)
	}
	want := "NAME   ENDPOINT   ADDRESS          CREDENTIAL    READY\n" +
		"a      Direct     https://a:6443   BearerToken   True\n" +
		"b      Direct     https://b:6443   BearerToken   False (CredentialExpired)\n"
	if out.String() != want {
		t.Errorf("without Reachable:\n%s\nwant:\n%s", out.String(), want)
	}

	out.Reset()
	reachable := metav1.Condition{Type: "Reachable", Status: metav1.ConditionFalse, Reason: "Unreachable"}
	if err := printList(&out, []gatewayv1alpha1.ClusterGateway{gw("a", ready, reachable), gw("b", ready)}); err != nil {
		t.Fatal(err)
	}
	want = "NAME   ENDPOINT   ADDRESS          CREDENTIAL    READY   REACHABLE\n" +
		"a      Direct     https://a:6443   BearerToken   True    False (Unreachable)\n" +
		"b      Direct     https://b:6443   BearerToken   True    Unknown\n"
	if out.String() != want {
		t.Errorf("with Reachable:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestProxyKubeconfigReusesTheHubUser(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"hub.kubeconfig": `apiVersion: v1
kind: Config
current-context: admin@hub
clusters:
- name: hub
  cluster: {server: "https://hub.example:6443/", certificate-authority: pki/ca.crt, proxy-url: "socks5://127.0.0.1:1080"}
- name: other
  cluster: {server: "https://other:6443", insecure-skip-tls-verify: true}
users:
- name: admin
  user: {client-certificate: pki/admin.crt, client-key: pki/admin.key}
- name: sso
  user:
    exec: {apiVersion: client.authentication.k8s.io/v1, command: kubelogin, args: [get-token], interactiveMode: Never}
contexts:
- {name: admin@hub, context: {cluster: hub, user: admin}}
- {name: sso@other, context: {cluster: other, user: sso}}
`,
		"pki/ca.crt": "CA", "pki/admin.crt": "CERT", "pki/admin.key": "KEY",
	})
	t.Chdir(t.TempDir())
	for _, c := range []struct {
		context, user, server, caFile string
	}{
		{context: "", user: "admin", server: "https://hub.example:6443/apis/gateway.clustergateway.io/v1alpha1/clustergateways/%s/proxy", caFile: filepath.Join(dir, "pki/ca.crt")},
		{context: "sso@other", user: "sso", server: "https://other:6443/apis/gateway.clustergateway.io/v1alpha1/clustergateways/%s/proxy"},
	} {
		h := newHub(genericiooptions.NewTestIOStreamsDiscard())
		if err := newRootCommand(h).ParseFlags([]string{"--kubeconfig", filepath.Join(dir, "hub.kubeconfig"), "--context", c.context}); err != nil {
			t.Fatal(err)
		}
		cfg, err := h.restConfig()
		if err != nil {
			t.Fatal(err)
		}
		user, err := h.userName()
		if err != nil || user != c.user {
			t.Fatalf("context %q: user %q, %v; want %q", c.context, user, err, c.user)
		}
		kc := proxyKubeconfig(cfg, h.proxyURL(), user, []string{"c1", "c2"})
		if kc.CurrentContext != "c1" || len(kc.Contexts) != 2 || len(kc.AuthInfos) != 1 {
			t.Errorf("context %q: current %q, contexts %v, users %v", c.context, kc.CurrentContext, sortedKeys(kc.Contexts), sortedKeys(kc.AuthInfos))
		}
		b, err := clientcmd.Write(*kc)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"c1", "c2"} {
			got, err := clientcmd.Load(b)
			if err != nil {
				t.Fatal(err)
			}
			rc, err := clientcmd.NewNonInteractiveClientConfig(*got, name, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
			if err != nil {
				t.Fatalf("context %q → %s: %v", c.context, name, err)
			}
			if want := strings.Replace(c.server, "%s", name, 1); rc.Host != want {
				t.Errorf("context %q → %s: server %q, want %q", c.context, name, rc.Host, want)
			}
			if rc.CAFile != c.caFile {
				t.Errorf("context %q → %s: CA file %q, want %q", c.context, name, rc.CAFile, c.caFile)
			}
			switch c.user {
			case "admin":
				if rc.CertFile != filepath.Join(dir, "pki/admin.crt") || rc.KeyFile != filepath.Join(dir, "pki/admin.key") {
					t.Errorf("cert user: files %q %q, want the hub's (absolute)", rc.CertFile, rc.KeyFile)
				}
				if got.Clusters[name].ProxyURL != "socks5://127.0.0.1:1080" {
					t.Errorf("hub proxy-url not carried: %q", got.Clusters[name].ProxyURL)
				}
			case "sso":
				if rc.ExecProvider == nil || rc.ExecProvider.Command != "kubelogin" || strings.Join(rc.ExecProvider.Args, " ") != "get-token" || !rc.Insecure {
					t.Errorf("exec user: %+v insecure %v; want the hub's exec plugin and settings", rc.ExecProvider, rc.Insecure)
				}
			}
		}
	}
}

func TestEveryCommandExplainsItself(t *testing.T) {
	root := NewCommand(genericiooptions.NewTestIOStreamsDiscard())
	cmds := append(root.Commands(), root)
	for _, c := range cmds {
		if c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		if c.Short == "" || c.Long == "" || !strings.Contains(c.Example, "kubectl cgw") {
			t.Errorf("%s: Short %q, Long %d bytes, Example %q: each command says what it does with an example", c.CommandPath(), c.Short, len(c.Long), c.Example)
		}
	}
}
