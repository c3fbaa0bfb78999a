package e2e

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http/httpguts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// The proxy subresource, end to end: the real kubectl talks to the real hub,
// whose aggregation layer hands the request to the gateway, which forwards it
// to a real managed kube-apiserver (and on to a fake kubelet for streams).

// TestProxyKubectlVerbs runs kubectl's everyday verbs against cluster-1
// through the hub, and checks each effect on the managed cluster directly.
func TestProxyKubectlVerbs(t *testing.T) {
	requireGateway(t)
	t.Parallel()
	via := env.Managed[0].ViaHubKubeconfig
	direct := managedClient(t, 0)
	ctx := context.Background()
	ns := uniqueName(t, "verbs")
	t.Cleanup(func() { _ = direct.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) })

	if out := mustKubectl(t, via, "get", "namespace", "default", "-o", "name"); strings.TrimSpace(out) != "namespace/default" {
		t.Fatalf("get namespace through the gateway = %q", out)
	}
	if out := mustKubectl(t, via, "api-resources", "--api-group=apps", "-o", "name"); !strings.Contains(out, "deployments.apps") {
		t.Fatalf("api-resources through the gateway lacks deployments.apps:\n%s", out)
	}
	mustKubectl(t, via, "create", "namespace", ns)

	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cm := func(name, value string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: %s\ndata:\n  key: %q\n", name, ns, value)
	}
	data := func(name string) (string, bool) {
		got, err := direct.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return "", false
		}
		if err != nil {
			t.Fatal(err)
		}
		return got.Data["key"], true
	}

	// --dry-run=server reaches the managed cluster (it validates) and writes nothing.
	mustKubectl(t, via, "apply", "--dry-run=server", "-f", write("dry.yaml", cm("dry", "x")))
	if _, ok := data("dry"); ok {
		t.Fatal("apply --dry-run=server through the gateway created the ConfigMap")
	}
	r := kubectl(t, via, nil, "", "apply", "--dry-run=server", "-f", write("bad.yaml", cm("Bad_Name", "x")))
	if r.Err == nil || !strings.Contains(r.Stderr, "Invalid value") {
		t.Fatalf("dry-run of an invalid object should be refused by the managed cluster; err=%v stderr=%s", r.Err, r.Stderr)
	}

	// Client-side apply, then an update by apply.
	mustKubectl(t, via, "apply", "-f", write("csa.yaml", cm("csa", "one")))
	mustKubectl(t, via, "apply", "-f", write("csa.yaml", cm("csa", "two")))
	if v, _ := data("csa"); v != "two" {
		t.Fatalf("client-side apply: data.key = %q, want two", v)
	}
	// Server-side apply, with its field manager recorded by the managed cluster.
	mustKubectl(t, via, "apply", "--server-side", "--field-manager=e2e", "-f", write("ssa.yaml", cm("ssa", "one")))
	got, err := direct.CoreV1().ConfigMaps(ns).Get(ctx, "ssa", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("server-side apply through the gateway did not create the ConfigMap: %v", err)
	}
	if len(got.ManagedFields) == 0 || got.ManagedFields[0].Manager != "e2e" || got.ManagedFields[0].Operation != metav1.ManagedFieldsOperationApply {
		t.Fatalf("server-side apply: managedFields = %+v, want an Apply by e2e", got.ManagedFields)
	}
	// Patches of each type.
	mustKubectl(t, via, "patch", "-n", ns, "configmap", "csa", "--type=merge", "-p", `{"data":{"key":"merged"}}`)
	if v, _ := data("csa"); v != "merged" {
		t.Fatalf("merge patch: data.key = %q", v)
	}
	mustKubectl(t, via, "patch", "-n", ns, "configmap", "csa", "--type=json", "-p", `[{"op":"replace","path":"/data/key","value":"json"}]`)
	if v, _ := data("csa"); v != "json" {
		t.Fatalf("json patch: data.key = %q", v)
	}
	mustKubectl(t, via, "patch", "-n", ns, "configmap", "csa", "-p", `{"data":{"key":"strategic"}}`)
	if v, _ := data("csa"); v != "strategic" {
		t.Fatalf("strategic merge patch: data.key = %q", v)
	}
	// Query strings reach the managed cluster: a label selector filters.
	mustKubectl(t, via, "label", "-n", ns, "configmap", "csa", "pick=me")
	if out := mustKubectl(t, via, "get", "-n", ns, "configmaps", "-l", "pick=me", "-o", "name"); strings.TrimSpace(out) != "configmap/csa" {
		t.Fatalf("get -l pick=me through the gateway = %q, want only configmap/csa", out)
	}
	mustKubectl(t, via, "delete", "-n", ns, "configmap", "csa", "ssa")
	if _, ok := data("csa"); ok {
		t.Fatal("delete through the gateway left the ConfigMap")
	}
}

// TestProxyStreams runs exec, port-forward and logs -f through the hub and
// the gateway, over WebSocket (kubectl's default) and SPDY, checking in
// kubectl's log which protocol was negotiated.
func TestProxyStreams(t *testing.T) {
	requireGateway(t)
	t.Parallel()
	for _, p := range streamProtocols {
		for _, c := range env.Managed {
			t.Run("exec/"+p.Name+"/"+c.Name, func(t *testing.T) { checkExec(t, c.ViaHubKubeconfig, p, c.Name) })
		}
		t.Run("port-forward/"+p.Name, func(t *testing.T) { checkPortForward(t, env.Managed[0].ViaHubKubeconfig, p) })
	}
	t.Run("logs-follow", func(t *testing.T) { checkLogsFollow(t, env.Managed[1].ViaHubKubeconfig, env.Managed[1].Name) })
}

// TestProxyWatchOutlivesRequestTimeout keeps `kubectl get -w` streaming
// through the gateway for more than three request timeouts, while an
// ordinary request that takes too long is still cut by the gateway.
func TestProxyWatchOutlivesRequestTimeout(t *testing.T) {
	requireGateway(t)
	t.Parallel()
	via := env.Managed[1].ViaHubKubeconfig
	direct := managedClient(t, 1)
	ctx := context.Background()
	ns := uniqueName(t, "watch")
	if _, err := direct.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = direct.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) })

	w := startKubectl(t, via, nil, "get", "configmaps", "-n", ns, "-w", "--request-timeout=0", "-o", "name")
	// A slow ordinary request, started now, must be cut by the gateway's
	// request timeout while the watch goes on.
	pod := ensureSlowPod(t, 1)
	type answer struct {
		code      int
		body      string
		err       error
		took      time.Duration
		startedAt time.Time
	}
	slow := make(chan answer, 1)
	timeouts := gatewayTimeouts(t)
	go func() {
		a := answer{startedAt: time.Now()}
		a.code, a.body, a.err = hubDo(proxyPath(env.Managed[1].GatewayName, "/api/v1/namespaces/default/pods/"+pod+"/log?container=slow"))
		a.took = time.Since(a.startedAt)
		slow <- a
	}()

	start := time.Now()
	end := start.Add(3*hubRequestTimeout + 5*time.Second)
	for i := 0; ; i++ {
		name := fmt.Sprintf("cm-%d", i)
		if _, err := direct.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		w.waitLine(t, regexp.MustCompile(`^configmap/`+name+`$`))
		if time.Now().After(end) {
			break
		}
		time.Sleep(hubRequestTimeout / 2)
	}
	if w.cmd.ProcessState != nil {
		t.Fatalf("the watch ended early; stderr: %s", w.stderr)
	}
	t.Logf("the watch streamed for %s (request timeout %s)", time.Since(start).Round(time.Second), hubRequestTimeout)

	// The fake kubelet would answer the slow request after ten minutes, the
	// managed kube-apiserver treats logs as long-running and the hub the whole
	// proxy subresource: only the gateway's request timeout can have ended it
	// while the watch was still streaming. The gateway's timeout answers with
	// its 504 Timeout Status, after the request ran for the whole timeout.
	var a answer
	select {
	case a = <-slow:
	default:
		t.Fatalf("a slow ordinary request through the gateway was still running after %s (request timeout %s)", time.Since(start).Round(time.Second), hubRequestTimeout)
	}
	var st metav1.Status
	if a.err != nil || a.code != http.StatusGatewayTimeout || json.Unmarshal([]byte(a.body), &st) != nil ||
		st.Status != metav1.StatusFailure || st.Code != http.StatusGatewayTimeout || st.Reason != metav1.StatusReasonTimeout {
		t.Fatalf("a slow ordinary request through the gateway ended after %s with %d %q (err %v); want the gateway's 504 Timeout Status",
			a.took.Round(100*time.Millisecond), a.code, a.body, a.err)
	}
	if a.took < hubRequestTimeout {
		t.Fatalf("the slow request was answered 504 after %s, before the gateway's request timeout %s", a.took, hubRequestTimeout)
	}
	if got := gatewayTimeouts(t) - timeouts; got < 1 {
		t.Fatalf("the gateway counted no request ended by its timeout (apiserver_request_terminations_total{code=\"504\"}): the 504 was not the gateway's")
	}
	t.Logf("the slow ordinary request was cut after %s: %d %s", a.took.Round(100*time.Millisecond), a.code, st.Message)
}

// gatewayTimeouts is how many requests the gateway's generic server has
// ended with its request timeout (its own count, by its own /metrics).
func gatewayTimeouts(t *testing.T) float64 {
	t.Helper()
	n := 0.0
	for k, v := range gatewayMetrics(t) {
		if strings.HasPrefix(k, "apiserver_request_terminations_total{") && strings.Contains(k, `code="504"`) {
			n += v
		}
	}
	return n
}

// TestProxyImpersonation: with mode Caller the managed cluster sees the hub
// caller; with mode None it sees the gateway's credential, whatever the
// caller asked the hub to impersonate.
func TestProxyImpersonation(t *testing.T) {
	requireGateway(t)
	t.Parallel()
	caller := directGateway(uniqueName(t, "caller"), 0)
	caller.Spec.Impersonation.Mode = gatewayv1alpha1.ImpersonationCaller
	createGateway(t, caller)
	none := directGateway(uniqueName(t, "none"), 0)
	createGateway(t, none)

	whoami := func(gateway string, extra ...string) (string, []string) {
		t.Helper()
		path := "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/" + gateway + "/proxy"
		kc := writeKubeconfig(t, env.Hub.URL+path)
		args := append([]string{"auth", "whoami", "-o", "json"}, extra...)
		out := mustKubectl(t, kc, args...)
		var review struct {
			Status struct {
				UserInfo struct {
					Username string   `json:"username"`
					Groups   []string `json:"groups"`
				} `json:"userInfo"`
			} `json:"status"`
		}
		if err := json.Unmarshal([]byte(out), &review); err != nil {
			t.Fatalf("whoami output: %v\n%s", err, out)
		}
		return review.Status.UserInfo.Username, review.Status.UserInfo.Groups
	}
	user, groups := whoami(caller.Name)
	if user != adminName() || !contains(groups, "system:masters") {
		t.Fatalf("mode Caller: the managed cluster saw %q %v, want the hub caller %q in system:masters", user, groups, adminName())
	}
	// The hub authorizes --as and hands the gateway that identity: it is the caller.
	user, groups = whoami(caller.Name, "--as=eve", "--as-group=system:masters")
	if user != "eve" || !contains(groups, "system:masters") {
		t.Fatalf("mode Caller with --as=eve: the managed cluster saw %q %v, want eve", user, groups)
	}
	// Without impersonation no Impersonate-* header the caller sent reaches the cluster.
	user, groups = whoami(none.Name, "--as=eve", "--as-group=system:masters", "--as-group=developers")
	if user != "gateway" || !contains(groups, "system:masters") || contains(groups, "developers") {
		t.Fatalf("mode None with --as=eve: the managed cluster saw %q %v, want the gateway's own user in system:masters", user, groups)
	}

	// The same, by every identity header that reached a cluster: a capture
	// cluster behind a Caller and a None gateway with a stored token.
	capture := startCapture(t)
	token := randomToken(t)
	for _, tc := range []struct {
		mode gatewayv1alpha1.ImpersonationMode
		want map[string][]string
	}{
		{gatewayv1alpha1.ImpersonationCaller, map[string][]string{
			"Authorization":            {"Bearer " + token},
			"Impersonate-User":         {"eve"},
			"Impersonate-Group":        {"system:masters", "developers"}, // not system:authenticated, which the hub adds
			"Impersonate-Extra-Scopes": {"view", "edit"},
		}},
		{gatewayv1alpha1.ImpersonationNone, map[string][]string{
			"Authorization": {"Bearer " + token},
		}},
	} {
		gw := tokenGateway(uniqueName(t, "capture-"+strings.ToLower(string(tc.mode))), capture.URL, token)
		gw.Spec.Endpoint.InsecureSkipTLSVerify, gw.Spec.Endpoint.CABundle = false, capture.CAPEM
		gw.Spec.Impersonation.Mode = tc.mode
		createGateway(t, gw)
		kc := writeKubeconfig(t, env.Hub.URL+proxyPath(gw.Name, ""))
		n := len(capture.requests())
		// eve may use the proxy on the hub as a member of system:masters.
		mustKubectl(t, kc, "get", "--raw", "/api/v1/namespaces", "--as=eve", "--as-group=system:masters", "--as-group=developers",
			"--as-user-extra=scopes=view", "--as-user-extra=scopes=edit")
		got := capture.since(n)
		if len(got) != 1 {
			t.Fatalf("mode %s: the cluster received %d requests, want 1", tc.mode, len(got))
		}
		if id := identityAt(got[0]); fmt.Sprint(id) != fmt.Sprint(tc.want) {
			t.Errorf("mode %s, kubectl --as=eve: identity headers at the cluster\n got %v\nwant %v", tc.mode, id, tc.want)
		}
	}
}

// TestProxyImpersonationExtras: in mode Caller the managed cluster sees
// exactly the extras the hub caller has, with keys that need escaping in a
// header name (':', '=', '@', '/', '%', space, upper case): on an ordinary
// request, as a real kube-apiserver reports them (SelfSubjectReview), and on
// exec, attach and port-forward over WebSocket and SPDY, as a capture in
// front of a real kube-apiserver recorded them (which also runs them).
func TestProxyImpersonationExtras(t *testing.T) {
	requireGateway(t)
	t.Parallel()
	caller := directGateway(uniqueName(t, "extras"), 0)
	caller.Spec.Impersonation.Mode = gatewayv1alpha1.ImpersonationCaller
	createGateway(t, caller)
	// The hub decodes impersonated keys as any kube-apiserver does: lower
	// case, then percent-decoded. This is what the hub caller has.
	want := map[string][]string{
		"example.com/tenant:id": {"t-1", "t-2"},
		"a@b":                   {"a b"},
		"upper/case":            {"x"},
		"a%2fb":                 {"%2F"},
		"with space":            {"v=1"},
	}
	asked := []string{"--as=eve", "--as-group=system:masters",
		"--as-user-extra=example.com/tenant:id=t-1", "--as-user-extra=example.com/tenant:id=t-2", "--as-user-extra=a@b=a b",
		"--as-user-extra=Upper/Case=x", "--as-user-extra=a%2Fb=%2F", "--as-user-extra=with space=v=1"}
	// --as-user-extra splits at the first '=': a key with '=' only comes
	// from a kubeconfig's as-user-extra.
	withEq := map[string][]string{"scope=x": {"read=all"}, "example.com/tenant:id": {"t-1"}}
	a := env.Hub.Admin
	impersonating := &clientcmdapi.AuthInfo{ClientCertificateData: a.CertPEM, ClientKeyData: a.KeyPEM,
		Impersonate: "eve", ImpersonateGroups: []string{"system:masters"}, ImpersonateUserExtra: withEq}

	t.Run("whoami", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			user *clientcmdapi.AuthInfo
			args []string
			want map[string][]string
		}{
			{"flags", &clientcmdapi.AuthInfo{ClientCertificateData: a.CertPEM, ClientKeyData: a.KeyPEM}, asked, want},
			{"kubeconfig", impersonating, nil, withEq},
		} {
			hub := whoamiExtra(t, kubeconfigFile(t, "", env.Hub.URL, env.Hub.CA.CertPEM, tc.user), tc.args...)
			if !reflect.DeepEqual(hub, tc.want) {
				t.Fatalf("%s: the hub caller's extras %q, want %q", tc.name, hub, tc.want)
			}
			managed := whoamiExtra(t, kubeconfigFile(t, "", env.Hub.URL+proxyPath(caller.Name, ""), env.Hub.CA.CertPEM, tc.user), tc.args...)
			if !reflect.DeepEqual(managed, hub) {
				t.Errorf("%s: the managed cluster saw extras %q, the hub caller has %q", tc.name, managed, hub)
			}
		}
	})

	m := env.Managed[0]
	capture := startCapture(t)
	capture.forwardTo(t, m)
	gw := tokenGateway(uniqueName(t, "extras-capture"), capture.URL, randomToken(t))
	gw.Spec.Endpoint.InsecureSkipTLSVerify, gw.Spec.Endpoint.CABundle = false, capture.CAPEM
	gw.Spec.Impersonation.Mode = gatewayv1alpha1.ImpersonationCaller
	createGateway(t, gw)
	kc := kubeconfigFile(t, "", env.Hub.URL+proxyPath(gw.Name, ""), env.Hub.CA.CertPEM, impersonating)
	attached := regexp.MustCompile(`^attached to ` + regexp.QuoteMeta(m.Name) + `/demo/main$`)
	for _, p := range streamProtocols {
		for _, sub := range []string{"exec", "attach", "portforward"} {
			t.Run(sub+"/"+p.Name, func(t *testing.T) {
				n := len(capture.requests())
				switch sub {
				case "exec":
					r := kubectl(t, kc, p.Env, "", "exec", "-v=6", "demo", "--", "hostname")
					if r.Err != nil || strings.TrimSpace(r.Stdout) != m.Name {
						t.Fatalf("exec hostname: %q, %v\nstderr: %s", r.Stdout, r.Err, r.Stderr)
					}
					p.checkNegotiated(t, sub, r.Stderr)
				case "attach":
					b := startKubectl(t, kc, p.Env, "attach", "-v=6", "demo")
					b.waitLine(t, attached)
					b.stop()
					p.checkNegotiated(t, sub, b.stderr.String())
				case "portforward":
					checkPortForward(t, kc, p)
				}
				upgrades := 0
				for _, r := range capture.since(n) {
					if r.Header.Get("Upgrade") != "" {
						upgrades++
						wantMethod, wantUpgrade := http.MethodGet, "websocket"
						if p.Name == "spdy" {
							wantMethod, wantUpgrade = http.MethodPost, "SPDY/3.1"
						}
						if !strings.HasSuffix(r.Path, "/"+sub) || r.Method != wantMethod || !strings.EqualFold(r.Header.Get("Upgrade"), wantUpgrade) {
							t.Errorf("upgrade at the cluster: %s %s Upgrade %q, want %s .../%s Upgrade %s", r.Method, r.Path, r.Header.Get("Upgrade"), wantMethod, sub, wantUpgrade)
						}
					}
					if got := extrasAt(t, r); !reflect.DeepEqual(got, withEq) || r.Header.Get("Impersonate-User") != "eve" {
						t.Errorf("%s %s: the cluster received user %q, extras %q; want eve, %q", r.Method, r.Path, r.Header.Get("Impersonate-User"), got, withEq)
					}
				}
				if upgrades != 1 {
					t.Errorf("the cluster received %d upgrade requests, want 1", upgrades)
				}
			})
		}
	}
}

// whoamiExtra is the extra of the user a SelfSubjectReview reports to
// `kubectl auth whoami` with kubeconfig and args.
func whoamiExtra(t *testing.T, kubeconfig string, args ...string) map[string][]string {
	t.Helper()
	out := mustKubectl(t, kubeconfig, append([]string{"auth", "whoami", "-o", "json"}, args...)...)
	var review struct {
		Status struct {
			UserInfo struct {
				Extra map[string][]string `json:"extra"`
			} `json:"userInfo"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &review); err != nil {
		t.Fatalf("whoami output: %v\n%s", err, out)
	}
	return review.Status.UserInfo.Extra
}

// extrasAt reads the Impersonate-Extra-* headers of a captured request as
// kube-apiserver's impersonation filter does: the name's suffix lower-cased,
// then url.PathUnescape. A name that is not a valid header name fails.
func extrasAt(t *testing.T, r capturedRequest) map[string][]string {
	t.Helper()
	const prefix = "impersonate-extra-"
	out := map[string][]string{}
	for name, vs := range r.Header {
		if !strings.HasPrefix(strings.ToLower(name), prefix) {
			continue
		}
		key, err := url.PathUnescape(strings.ToLower(name[len(prefix):]))
		if !httpguts.ValidHeaderFieldName(name) || err != nil {
			t.Errorf("header %q at the cluster is not a valid name or does not decode (%v)", name, err)
		}
		out[key] = append(out[key], vs...)
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// adminName is the hub admin's user name: its client certificate's CN.
func adminName() string {
	block, _ := pem.Decode(env.Hub.Admin.CertPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return ""
	}
	return cert.Subject.CommonName
}

// writeKubeconfig writes a hub-admin kubeconfig whose server is server.
func writeKubeconfig(t *testing.T, server string) string {
	t.Helper()
	a := env.Hub.Admin
	return kubeconfigFile(t, "", server, env.Hub.CA.CertPEM, &clientcmdapi.AuthInfo{ClientCertificateData: a.CertPEM, ClientKeyData: a.KeyPEM})
}
