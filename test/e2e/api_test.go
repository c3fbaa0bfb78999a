package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// API tests drive the ClusterGateway resource through the real hub (its
// aggregation layer routes gateway.clustergateway.io to the gateway) with the
// real kubectl, and look at the Secrets behind it as the hub's admin.

const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// TestAPIApplyGetWatchDelete: client-side `kubectl apply` creates an X509
// gateway; the table has the documented columns; -o yaml has status but no
// credential material anywhere (spec, last-applied annotation); `get -w`
// sees a later update and the delete; `kubectl delete` removes the Secret.
func TestAPIApplyGetWatchDelete(t *testing.T) {
	requireGateway(t)
	t.Parallel()
	hub := env.Hub.Kubeconfig
	name := uniqueName(t, "e2e-apply")
	creds := newTestCreds(t, name)
	cleanupGateway(t, name)

	out := kubectlStdin(t, hub, x509GatewayYAML(name, "https://127.0.0.9:6443", nil, creds), "apply", "-f", "-")
	if !strings.Contains(out, name+" created") {
		t.Errorf("kubectl apply: %q, want %q", out, name+" created")
	}

	// Table: the server's columns, in order.
	out = mustKubectl(t, hub, "get", "clustergateways", name)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if got, want := strings.Fields(lines[0]), []string{"NAME", "ENDPOINT", "ADDRESS", "CREDENTIAL", "READY", "REACHABLE", "AGE"}; !slices.Equal(got, want) {
		t.Errorf("table header = %v, want %v\n%s", got, want, out)
	}
	if row := tableRow(out, name); len(row) != 7 || !slices.Equal(row[:5], []string{name, "Direct", "https://127.0.0.9:6443", "X509Certificate", "True"}) {
		t.Errorf("table row = %v, want [%s Direct https://127.0.0.9:6443 X509Certificate True <reachable> <age>]\n%s", row, name, out)
	}

	// YAML: status, a redacted last-applied annotation, no material.
	out = mustKubectl(t, hub, "get", "cgw", name, "-o", "yaml")
	requireNoMaterial(t, "kubectl get -o yaml", out, creds.CertPEM, creds.KeyPEM)
	var gw gatewayv1alpha1.ClusterGateway
	if err := yaml.Unmarshal([]byte(out), &gw); err != nil {
		t.Fatalf("parse -o yaml: %v\n%s", err, out)
	}
	if gw.Spec.Credential.X509 != nil || gw.Spec.Credential.Type != gatewayv1alpha1.CredentialX509Certificate {
		t.Errorf("spec.credential = %+v, want type X509Certificate and no x509", gw.Spec.Credential)
	}
	if string(gw.Spec.Endpoint.CABundle) != string(creds.CAPEM) || gw.Spec.Endpoint.Type != gatewayv1alpha1.EndpointDirect ||
		gw.Spec.Impersonation.Mode != gatewayv1alpha1.ImpersonationNone {
		t.Errorf("spec.endpoint/impersonation = %+v / %+v, want the caBundle applied, defaults Direct and None", gw.Spec.Endpoint, gw.Spec.Impersonation)
	}
	if c := readyCondition(&gw); c == nil || c.Status != metav1.ConditionTrue || c.Reason != gatewayv1alpha1.ReasonValid {
		t.Errorf("Ready condition = %+v, want True/Valid", c)
	}
	if cs := gw.Status.Credential; cs == nil || cs.Subject != creds.Subject || cs.NotAfter == nil || !cs.NotAfter.Time.Equal(creds.NotAfter) {
		t.Errorf("status.credential = %+v, want subject %q notAfter %s", cs, creds.Subject, creds.NotAfter)
	}
	la, ok := gw.Annotations[lastApplied]
	if !ok || !strings.Contains(la, `"address":"https://127.0.0.9:6443"`) || !strings.Contains(la, `"type":"X509Certificate"`) ||
		strings.Contains(la, "x509") || strings.Contains(la, "privateKey") {
		t.Errorf("annotation %s = %q, want kubectl's applied configuration without material", lastApplied, la)
	}
	// Every gateway listed, including localenv's, keeps its material to itself.
	out = mustKubectl(t, hub, "get", "cgw", "-o", "yaml")
	requireNoMaterial(t, "kubectl get cgw -o yaml (list)", out, creds.CertPEM, creds.KeyPEM,
		env.Managed[0].GatewayUser.CertPEM, env.Managed[0].GatewayUser.KeyPEM)

	// The Secret holds the material; its annotations do not.
	s := mustSecret(t, name)
	if string(s.Data["tls.crt"]) != string(creds.CertPEM) || string(s.Data["tls.key"]) != string(creds.KeyPEM) ||
		string(s.Data["credential-type"]) != "X509Certificate" || s.Labels[gatewayLabel] != "true" {
		t.Errorf("Secret: labels %v, data keys %v; want the label and the applied certificate and key", s.Labels, keys(s.Data))
	}
	for k, v := range s.Annotations {
		requireNoMaterial(t, "Secret annotation "+k, v, creds.CertPEM, creds.KeyPEM)
	}

	// Watch: a later update, then the delete.
	w := startKubectl(t, hub, nil, "get", "clustergateways", "-w", "--output-watch-events", "--request-timeout=2m")
	w.waitLineWithin(t, regexp.MustCompile(`^ADDED\s+`+regexp.QuoteMeta(name)+`\s`), pollTimeout)
	kubectlStdin(t, hub, x509GatewayYAML(name, "https://127.0.0.8:6443", nil, creds), "apply", "-f", "-")
	w.waitLineWithin(t, regexp.MustCompile(`^MODIFIED\s+`+regexp.QuoteMeta(name)+`\s+Direct\s+https://127\.0\.0\.8:6443\s+X509Certificate\s+True\s`), pollTimeout)

	out = mustKubectl(t, hub, "delete", "cgw", name)
	if !strings.Contains(out, name+`" deleted`) && !strings.Contains(out, name+" deleted") {
		t.Errorf("kubectl delete: %q", out)
	}
	w.waitLineWithin(t, regexp.MustCompile(`^DELETED\s+`+regexp.QuoteMeta(name)+`\s`), pollTimeout)
	w.stop()
	requireNoSecret(t, name)
	if stderr := kubectlFails(t, hub, "get", "cgw", name); !strings.Contains(stderr, "NotFound") || !strings.Contains(stderr, `clustergateways.gateway.clustergateway.io "`+name+`" not found`) {
		t.Errorf("get after delete: %s", stderr)
	}
}

// TestAPIExplainAndDiscovery: the hub publishes the resource (short name,
// cluster scope) and its OpenAPI schema, so `kubectl explain` works.
func TestAPIExplainAndDiscovery(t *testing.T) {
	requireGateway(t)
	t.Parallel()
	hub := env.Hub.Kubeconfig
	out := mustKubectl(t, hub, "explain", "clustergateway.spec.endpoint")
	for _, want := range []string{"KIND:", "ClusterGateway", "gateway.clustergateway.io", "v1alpha1",
		"Endpoint is where", "address", "caBundle", "insecureSkipTLSVerify", "proxyURL", "serverName", "type"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl explain clustergateway.spec.endpoint lacks %q:\n%s", want, out)
		}
	}
	out = mustKubectl(t, hub, "explain", "cgw.status.credential")
	if !strings.Contains(out, "notAfter") || !strings.Contains(out, "subject") {
		t.Errorf("kubectl explain cgw.status.credential:\n%s", out)
	}
	// Every level of spec and status is described, and no sentence says the
	// same twice (a field's description followed by its type's).
	for _, path := range []string{"", ".metadata", ".spec", ".spec.endpoint", ".spec.credential", ".spec.credential.x509", ".spec.impersonation",
		".status", ".status.conditions", ".status.credential", ".status.reachability"} {
		out := mustKubectl(t, hub, "explain", "clustergateway"+path)
		if strings.Contains(out, "<no description>") {
			t.Errorf("kubectl explain clustergateway%s has a field without a description:\n%s", path, out)
		}
		desc := out
		if i := strings.Index(desc, "DESCRIPTION:"); i >= 0 {
			desc = desc[i:]
		}
		if i := strings.Index(desc, "FIELDS:"); i >= 0 {
			desc = desc[:i]
		}
		seen := map[string]bool{}
		for _, sentence := range strings.Split(strings.Join(strings.Fields(desc), " "), ". ") {
			key := strings.ToLower(strings.TrimSuffix(sentence, "."))
			if len(key) > 20 && seen[key] {
				t.Errorf("kubectl explain clustergateway%s repeats %q:\n%s", path, sentence, out)
			}
			seen[key] = true
		}
	}

	// Discovery: the verbs and subresources docs/api.md lists.
	var resources metav1.APIResourceList
	if err := json.Unmarshal([]byte(mustKubectl(t, hub, "get", "--raw", "/apis/gateway.clustergateway.io/v1alpha1")), &resources); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range resources.APIResources {
		names = append(names, r.Name)
		if r.Name == "clustergateways" {
			verbs := slices.Clone([]string(r.Verbs))
			slices.Sort(verbs)
			if want := []string{"create", "delete", "get", "list", "patch", "update", "watch"}; !slices.Equal(verbs, want) {
				t.Errorf("clustergateways verbs = %v, want %v", verbs, want)
			}
			if r.Namespaced || !slices.Equal(r.ShortNames, []string{"cgw"}) || !slices.Equal(r.Categories, []string{"all-clusters"}) || r.SingularName != "clustergateway" {
				t.Errorf("clustergateways discovery = %+v", r)
			}
		}
	}
	slices.Sort(names)
	if want := []string{"clustergateways", "clustergateways/health", "clustergateways/proxy"}; !slices.Equal(names, want) {
		t.Errorf("resources = %v, want %v (no status subresource)", names, want)
	}

	out = mustKubectl(t, hub, "api-resources", "--api-group=gateway.clustergateway.io", "--no-headers")
	row := strings.Fields(out)
	if want := []string{"clustergateways", "cgw", "gateway.clustergateway.io/v1alpha1", "false", "ClusterGateway"}; !slices.Equal(row, want) {
		t.Errorf("api-resources = %q, want %v", out, want)
	}
}

// TestAPIHandWrittenSecret: a Secret written with the documented keys and
// label (as a GitOps tool would) is a gateway; a gateway patch keeps what the
// gateway does not model; `kubectl delete cgw` deletes the Secret.
func TestAPIHandWrittenSecret(t *testing.T) {
	requireGateway(t)
	t.Parallel()
	hub := env.Hub.Kubeconfig
	name := uniqueName(t, "e2e-secret")
	creds := newTestCreds(t, name)
	token := randomToken(t)
	team := uniqueName(t, "team")
	cleanupGateway(t, name)

	manifest := fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata:
  name: %s
  namespace: %s
  labels:
    %s: "true"
    gitops.example/owner: platform
type: Opaque
stringData:
  labels: '{"team":"%s"}'
  endpoint: https://127.0.0.3:6443
  ca.crt: |
%s
  server-name: kubernetes.default.svc
  credential-type: BearerToken
  token: %s
  impersonation: Caller
  owner-notes: kept by the gateway
`, name, secretNamespace, gatewayLabel, team, indent(string(creds.CAPEM), "    "), token)
	kubectlStdin(t, hub, manifest, "apply", "-f", "-")

	var gw gatewayv1alpha1.ClusterGateway
	eventually(t, "the hand-written Secret appears as a gateway", func() error {
		r := kubectl(t, hub, nil, "", "get", "cgw", name, "-o", "yaml")
		if r.Err != nil {
			return fmt.Errorf("%v: %s", r.Err, r.Stderr)
		}
		requireNoMaterial(t, "gateway of a hand-written Secret", r.Stdout, []byte(token))
		return yaml.Unmarshal([]byte(r.Stdout), &gw)
	})
	ep := gw.Spec.Endpoint
	if ep.Type != gatewayv1alpha1.EndpointDirect || ep.Address != "https://127.0.0.3:6443" || string(ep.CABundle) != string(creds.CAPEM) ||
		ep.ServerName != "kubernetes.default.svc" || gw.Spec.Credential.Type != gatewayv1alpha1.CredentialBearerToken ||
		gw.Spec.Impersonation.Mode != gatewayv1alpha1.ImpersonationCaller {
		t.Errorf("gateway spec = %+v, want the Secret's data (type defaulted to Direct)", gw.Spec)
	}
	if c := readyCondition(&gw); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Ready = %+v, want True", c)
	}
	// The gateway's labels are its data's; the Secret's own labels are not the gateway's.
	if len(gw.Labels) != 1 || gw.Labels["team"] != team {
		t.Errorf("labels = %v, want only team=%s (not the Secret's own labels)", gw.Labels, team)
	}
	if _, ok := gw.Annotations[lastApplied]; ok {
		t.Errorf("the Secret's own last-applied configuration (which holds the token) shows on the gateway: %v", gw.Annotations)
	}
	if out := mustKubectl(t, hub, "get", "cgw", "-l", "team="+team, "-o", "name"); strings.TrimSpace(out) != "clustergateway.gateway.clustergateway.io/"+name {
		t.Errorf("get -l team=%s = %q", team, out)
	}

	// A gateway patch rewrites the Secret but keeps the token, the unmodelled
	// key and the Secret's own labels and last-applied annotation.
	mustKubectl(t, hub, "patch", "cgw", name, "--type=merge", "-p", `{"metadata":{"labels":{"patched":"yes"}},"spec":{"impersonation":{"mode":"Caller"}}}`)
	s := mustSecret(t, name)
	if string(s.Data["labels"]) != `{"patched":"yes","team":"`+team+`"}` || string(s.Data["token"]) != token ||
		string(s.Data["owner-notes"]) != "kept by the gateway" || s.Annotations[lastApplied] == "" || s.Labels["gitops.example/owner"] != "platform" {
		t.Errorf("Secret after patch: labels %q, token kept %v, owner-notes %q, own last-applied kept %v, own labels %v",
			s.Data["labels"], string(s.Data["token"]) == token, s.Data["owner-notes"], s.Annotations[lastApplied] != "", s.Labels)
	}

	mustKubectl(t, hub, "delete", "cgw", name)
	requireNoSecret(t, name)
}

// TestAPIServerSideApplyAndPatches: `kubectl apply --server-side`, merge,
// JSON and strategic patches and `kubectl replace` all work, and every update
// that omits the (write-only) token keeps the stored one.
func TestAPIServerSideApplyAndPatches(t *testing.T) {
	requireGateway(t)
	t.Parallel()
	hub := env.Hub.Kubeconfig
	name := uniqueName(t, "e2e-ssa")
	token := randomToken(t)
	cleanupGateway(t, name)
	client := gatewayClient(t, hub)

	// checkSecret: the stored token is still token, and data[key] == want.
	checkSecret := func(step, key, want string) {
		t.Helper()
		s := mustSecret(t, name)
		if string(s.Data["token"]) != token {
			t.Errorf("%s: Secret token = %q, want the stored %q", step, s.Data["token"], token)
		}
		if got := string(s.Data[key]); got != want {
			t.Errorf("%s: Secret data[%s] = %q, want %q", step, key, got, want)
		}
	}

	out := kubectlStdin(t, hub, tokenGatewayYAML(name, "https://127.0.0.4:6443", map[string]string{"e2e": "ssa"}, token),
		"apply", "--server-side", "-f", "-")
	if !strings.Contains(out, "serverside-applied") {
		t.Errorf("apply --server-side: %q", out)
	}
	checkSecret("server-side apply (create)", "endpoint", "https://127.0.0.4:6443")
	gw, err := client.GatewayV1alpha1().ClusterGateways().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(gw.ManagedFields, func(m metav1.ManagedFieldsEntry) bool {
		return m.Manager == "kubectl" && m.Operation == metav1.ManagedFieldsOperationApply
	}) {
		t.Errorf("managedFields = %+v, want an Apply entry of manager kubectl", gw.ManagedFields)
	}
	if gw.Spec.Credential.BearerToken != "" {
		t.Errorf("GET returned the bearer token")
	}

	// Re-apply without the token: the applier no longer owns it, but the
	// stored one is kept while the endpoint stays the same.
	out = kubectlStdin(t, hub, tokenGatewayYAML(name, "https://127.0.0.4:6443", map[string]string{"e2e": "ssa", "step": "reapply"}, ""),
		"apply", "--server-side", "-f", "-")
	if !strings.Contains(out, "serverside-applied") {
		t.Errorf("apply --server-side (update): %q", out)
	}
	checkSecret("server-side apply without token", "labels", `{"e2e":"ssa","step":"reapply"}`)

	// Moving the endpoint without the token is refused: the stored token
	// never follows a change of where it is sent.
	r := kubectl(t, hub, nil, tokenGatewayYAML(name, "https://127.0.0.5:6443", map[string]string{"e2e": "ssa"}, ""), "apply", "--server-side", "-f", "-")
	if r.Err == nil || !strings.Contains(r.Stderr, "spec.credential.bearerToken") || !strings.Contains(r.Stderr, "spec.endpoint.address") {
		t.Errorf("apply moving the endpoint without the token: err=%v stderr=%s; want 422 naming both fields", r.Err, r.Stderr)
	}
	checkSecret("refused move", "endpoint", "https://127.0.0.4:6443")
	// ...and allowed with it.
	out = kubectlStdin(t, hub, tokenGatewayYAML(name, "https://127.0.0.5:6443", map[string]string{"e2e": "ssa"}, token), "apply", "--server-side", "-f", "-")
	checkSecret("move with the token", "endpoint", "https://127.0.0.5:6443")

	mustKubectl(t, hub, "patch", "cgw", name, "--type=merge", "-p", `{"metadata":{"labels":{"step":"merge"}}}`)
	checkSecret("merge patch", "labels", `{"e2e":"ssa","step":"merge"}`)

	mustKubectl(t, hub, "patch", "cgw", name, "--type=json", "-p", `[{"op":"replace","path":"/metadata/labels/step","value":"json"}]`)
	checkSecret("json patch", "labels", `{"e2e":"ssa","step":"json"}`)

	mustKubectl(t, hub, "patch", "cgw", name, "--type=strategic", "-p", `{"metadata":{"labels":{"patched":"strategic"}}}`)
	checkSecret("strategic patch", "labels", `{"e2e":"ssa","patched":"strategic","step":"json"}`)
	if s := mustSecret(t, name); len(s.Labels) != 1 || s.Labels[gatewayLabel] != "true" {
		t.Errorf("Secret labels after patches = %v, want only the gateway label (the gateway's labels are in its data)", s.Labels)
	}

	// replace is a full update without the token; it drops the labels.
	kubectlStdin(t, hub, tokenGatewayYAML(name, "https://127.0.0.5:6443", nil, ""), "replace", "-f", "-")
	checkSecret("replace", "labels", "")

	// Rotating the token is an update that does carry it.
	newToken := randomToken(t)
	mustKubectl(t, hub, "patch", "cgw", name, "--type=merge", "-p", `{"spec":{"credential":{"bearerToken":"`+newToken+`"}}}`)
	token = newToken
	checkSecret("token rotation", "credential-type", "BearerToken")

	out = mustKubectl(t, hub, "get", "cgw", name, "-o", "json")
	requireNoMaterial(t, "get -o json after updates", out, []byte(token))
}

// TestAPISelectors: -l selects on the gateway's labels and --field-selector
// on metadata.name (the only supported field).
func TestAPISelectors(t *testing.T) {
	requireGateway(t)
	t.Parallel()
	hub := env.Hub.Kubeconfig
	client := gatewayClient(t, hub).GatewayV1alpha1().ClusterGateways()
	run := uniqueName(t, "run")
	var names []string
	for _, role := range []string{"a", "b"} {
		name := uniqueName(t, "e2e-sel-"+role)
		cleanupGateway(t, name)
		gw := tokenGateway(name, "https://127.0.0.9:6443", randomToken(t))
		gw.Labels = map[string]string{"e2e-run": run, "role": role}
		if _, err := client.Create(context.Background(), gw, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		names = append(names, name)
	}
	slices.Sort(names)

	getNames := func(args ...string) []string {
		t.Helper()
		out := mustKubectl(t, hub, append([]string{"get", "cgw", "-o", "jsonpath={.items[*].metadata.name}"}, args...)...)
		got := strings.Fields(out)
		slices.Sort(got)
		return got
	}
	if got := getNames("-l", "e2e-run="+run); !slices.Equal(got, names) {
		t.Errorf("-l e2e-run=%s: %v, want %v", run, got, names)
	}
	if got := getNames("-l", "e2e-run="+run+",role=b"); !slices.Equal(got, names[1:]) {
		t.Errorf("-l e2e-run=%s,role=b: %v, want %v", run, got, names[1:])
	}
	if got := getNames("-l", "e2e-run="+run+",role notin (a,b)"); len(got) != 0 {
		t.Errorf("-l role notin (a,b): %v, want none", got)
	}
	if got := getNames("--field-selector", "metadata.name="+names[0]); !slices.Equal(got, names[:1]) {
		t.Errorf("--field-selector metadata.name=%s: %v", names[0], got)
	}
	if got := getNames("--field-selector", "metadata.name!="+names[0], "-l", "e2e-run="+run); !slices.Equal(got, names[1:]) {
		t.Errorf("--field-selector metadata.name!=%s -l e2e-run: %v", names[0], got)
	}
	if got := getNames("--field-selector", "metadata.name=cluster-1", "-l", "e2e-run="+run); len(got) != 0 {
		t.Errorf("cluster-1 with our label selector: %v, want none", got)
	}
	if stderr := kubectlFails(t, hub, "get", "cgw", "--field-selector", "spec.endpoint.address=https://127.0.0.9:6443"); !strings.Contains(stderr, "only metadata.name") {
		t.Errorf("unsupported field selector: %s", stderr)
	}
	// The Secrets' internal label is not the gateways': refused for list and watch alike.
	for _, extra := range [][]string{nil, {"-w", "--request-timeout=5s"}} {
		args := append([]string{"get", "cgw", "-l", "gateway.clustergateway.io/cluster-gateway=true"}, extra...)
		if stderr := kubectlFails(t, hub, args...); !strings.Contains(stderr, "internal") {
			t.Errorf("selector on the internal label %v: %s", extra, stderr)
		}
	}
}

// TestAPIServerDryRun: --dry-run=server create, patch and delete change nothing.
func TestAPIServerDryRun(t *testing.T) {
	requireGateway(t)
	t.Parallel()
	hub := env.Hub.Kubeconfig
	name := uniqueName(t, "e2e-dryrun")
	creds := newTestCreds(t, name)
	cleanupGateway(t, name)

	out := kubectlStdin(t, hub, x509GatewayYAML(name, "https://127.0.0.9:6443", nil, creds), "apply", "--dry-run=server", "-f", "-")
	if !strings.Contains(out, "(server dry run)") {
		t.Errorf("apply --dry-run=server: %q", out)
	}
	requireNoSecret(t, name)
	if stderr := kubectlFails(t, hub, "get", "cgw", name); !strings.Contains(stderr, "not found") {
		t.Errorf("get after a dry-run create: %s", stderr)
	}
	// -o yaml of a dry run is an API response too: no material in it.
	out = kubectlStdin(t, hub, x509GatewayYAML(name, "https://127.0.0.9:6443", nil, creds), "create", "--dry-run=server", "-o", "yaml", "-f", "-")
	requireNoMaterial(t, "create --dry-run=server -o yaml", out, creds.CertPEM, creds.KeyPEM)

	client := gatewayClient(t, hub).GatewayV1alpha1().ClusterGateways()
	if _, err := client.Create(context.Background(), x509Gateway(name, "https://127.0.0.9:6443", creds), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := mustSecret(t, name)
	// Moving a gateway carries its material again (it is kept only while the endpoint stays).
	mustKubectl(t, hub, "patch", "cgw", name, "--dry-run=server", "--type=merge", "-p", fmt.Sprintf(
		`{"spec":{"endpoint":{"address":"https://127.0.0.2:6443"},"credential":{"x509":{"certificate":%q,"privateKey":%q}}}}`,
		base64.StdEncoding.EncodeToString(creds.CertPEM), base64.StdEncoding.EncodeToString(creds.KeyPEM)))
	mustKubectl(t, hub, "delete", "cgw", name, "--dry-run=server")
	after := mustSecret(t, name)
	if after.ResourceVersion != before.ResourceVersion || string(after.Data["endpoint"]) != "https://127.0.0.9:6443" {
		t.Errorf("dry-run patch and delete changed the Secret: rv %s -> %s, endpoint %q", before.ResourceVersion, after.ResourceVersion, after.Data["endpoint"])
	}
	if err := client.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	requireNoSecret(t, name)
	if _, err := client.Get(context.Background(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get after delete: %v, want NotFound (the delete waits for the cache)", err)
	}
}

// TestAPIMalformedSecret: Secrets that cannot be used still list as
// gateways, Ready=False with a message naming the problem, while the good
// gateways (localenv's cluster-1 and cluster-2) stay Ready=True.
func TestAPIMalformedSecret(t *testing.T) {
	requireGateway(t)
	t.Parallel()
	hub := env.Hub.Kubeconfig
	admin := hubAdmin(t)
	run := uniqueName(t, "run")
	cases := []struct {
		name      string
		data      map[string]string
		wantInMsg []string
	}{
		{uniqueName(t, "e2e-bad-ca"), map[string]string{"endpoint": "https://127.0.0.9:6443", "ca.crt": "garbage", "credential-type": "BearerToken", "token": "x"},
			[]string{"spec.endpoint.caBundle", "PEM certificate"}},
		{uniqueName(t, "e2e-no-endpoint"), map[string]string{"credential-type": "BearerToken", "token": "x", "insecure-skip-tls-verify": "true"},
			[]string{"spec.endpoint.address", "is required"}},
		{uniqueName(t, "e2e-bad-bool"), map[string]string{"endpoint": "https://127.0.0.9:6443", "insecure-skip-tls-verify": "yes please", "credential-type": "BearerToken", "token": "x"},
			[]string{"data[insecure-skip-tls-verify]", "true or false"}},
		{uniqueName(t, "e2e-no-key"), map[string]string{"endpoint": "https://127.0.0.9:6443", "credential-type": "X509Certificate", "tls.crt": string(env.Managed[0].GatewayUser.CertPEM)},
			[]string{"spec.credential.x509.privateKey", "Required"}},
	}
	for _, c := range cases {
		cleanupGateway(t, c.name)
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: secretNamespace, Labels: map[string]string{gatewayLabel: "true"}},
			StringData: c.data,
		}
		s.StringData["labels"] = `{"e2e-run":"` + run + `"}` // the gateway's labels
		if _, err := admin.CoreV1().Secrets(secretNamespace).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	client := gatewayClient(t, hub).GatewayV1alpha1().ClusterGateways()
	eventually(t, "the malformed Secrets list as gateways", func() error {
		list, err := client.List(context.Background(), metav1.ListOptions{LabelSelector: "e2e-run=" + run})
		if err != nil {
			return err
		}
		if len(list.Items) != len(cases) {
			return fmt.Errorf("%d gateways, want %d", len(list.Items), len(cases))
		}
		return nil
	})
	for _, c := range cases {
		gw, err := client.Get(context.Background(), c.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cond := readyCondition(gw)
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != gatewayv1alpha1.ReasonInvalidSecret {
			t.Errorf("%s: Ready = %+v, want False/InvalidSecret", c.name, cond)
			continue
		}
		for _, want := range c.wantInMsg {
			if !strings.Contains(cond.Message, want) {
				t.Errorf("%s: Ready message %q does not name %q", c.name, cond.Message, want)
			}
		}
	}

	// The table shows them not ready, and the good gateways still ready.
	out := mustKubectl(t, hub, "get", "cgw")
	for _, c := range cases {
		if row := tableRow(out, c.name); len(row) < 3 || row[len(row)-3] != "False" {
			t.Errorf("row of %s = %v, want READY False\n%s", c.name, row, out)
		}
	}
	for _, m := range env.Managed {
		row := tableRow(out, m.GatewayName)
		if len(row) != 7 || row[4] != "True" || row[2] != m.URL {
			t.Errorf("row of %s = %v, want address %s and READY True\n%s", m.GatewayName, row, m.URL, out)
		}
	}

	// Unusable gateways can still be deleted through the API.
	for _, c := range cases {
		if err := client.Delete(context.Background(), c.name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete %s: %v", c.name, err)
		}
		requireNoSecret(t, c.name)
	}
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = prefix + lines[i]
	}
	return strings.Join(lines, "\n")
}
