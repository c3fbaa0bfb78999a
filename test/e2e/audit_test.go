package e2e

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// The gateway's audit annotations of the inner request (pkg/proxy/audit.go, docs/audit.md).
const auditPrefix = "proxy.gateway.clustergateway.io/"

// auditPolicy is docs/audit.md's minimal policy: the proxy subresource at
// Metadata (annotations included), nothing else.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    resources:
      - group: gateway.clustergateway.io
        resources: ["clustergateways/proxy"]
  - level: None
`

// auditEvent is the part of an audit.k8s.io/v1 Event the test reads.
type auditEvent struct {
	Stage       string            `json:"stage"`
	Verb        string            `json:"verb"`
	RequestURI  string            `json:"requestURI"`
	Annotations map[string]string `json:"annotations"`
	User        struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef struct {
		Resource, Subresource, Name string
	} `json:"objectRef"`
}

// TestAuditInnerRequest restarts the gateway with the generic audit flags
// (--audit-policy-file, --audit-log-path) and checks, in the gateway's audit
// log, that a get, a delete (of a ConfigMap) and an exec over WebSocket
// through the hub each carry the cluster, the inner verb, resource,
// subresource, namespace and name, and the identity used on the cluster:
// the stored certificate's subject for cluster-1 (impersonation None), the
// hub caller for a gateway in Caller mode. No annotation carries material.
// It restarts the gateway, so it is not parallel.
func TestAuditInnerRequest(t *testing.T) {
	requireGateway(t)
	m := env.Managed[0]
	policy := filepath.Join(t.TempDir(), "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(env.StateDir, "logs", "audit-"+uniqueName(t, "gateway")+".log")
	restartGateway(t, append(append([]string{}, env.GatewayArgs...), "--audit-policy-file="+policy, "--audit-log-path="+logPath))
	t.Cleanup(func() { restartGateway(t, nil) })

	direct := managedClient(t, 0)
	cm := uniqueName(t, "audited")
	createConfigMap(t, direct, "default", cm)
	mustKubectl(t, m.ViaHubKubeconfig, "get", "configmap", cm, "-n", "default")
	mustKubectl(t, m.ViaHubKubeconfig, "delete", "configmap", cm, "-n", "default")
	ws := streamProtocols[0]
	r := kubectl(t, m.ViaHubKubeconfig, ws.Env, "", "exec", "-v=6", "demo", "--", "hostname")
	if r.Err != nil || strings.TrimSpace(r.Stdout) != m.Name {
		t.Fatalf("exec over WebSocket: %q, %v\n%s", r.Stdout, r.Err, r.Stderr)
	}
	ws.checkNegotiated(t, "exec", r.Stderr)

	caller := directGateway(uniqueName(t, "audit-caller"), 0)
	caller.Spec.Impersonation.Mode = gatewayv1alpha1.ImpersonationCaller
	createGateway(t, caller)
	_, via := viaHub(t, caller.Name)
	eventually(t, "a get through the Caller gateway", func() error {
		_, err := via.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{})
		return err
	})

	subject := "x509:" + certSubject(t, m.GatewayUser.CertPEM)
	base := map[string]string{
		"cluster": m.GatewayName, "inner-api-version": "v1", "impersonation": "None",
		"identity": subject, "authenticated-as": subject,
	}
	with := func(extra map[string]string) map[string]string {
		out := maps.Clone(base)
		maps.Copy(out, extra)
		return out
	}
	want := map[string]map[string]string{
		"get": with(map[string]string{"inner-verb": "get", "inner-resource": "configmaps", "inner-namespace": "default", "inner-name": cm}),
		"delete": with(map[string]string{
			"inner-verb": "delete", "inner-resource": "configmaps", "inner-namespace": "default", "inner-name": cm,
		}),
		// Over WebSocket exec is a GET; the cluster records it as get on pods/exec too.
		"exec": with(map[string]string{
			"inner-verb": "get", "inner-resource": "pods", "inner-subresource": "exec", "inner-namespace": "default", "inner-name": "demo",
		}),
		"caller": {
			// A Namespace's RequestInfo names it as its own namespace, as the cluster's audit does.
			"cluster": caller.Name, "inner-verb": "get", "inner-api-version": "v1", "inner-resource": "namespaces", "inner-namespace": "default", "inner-name": "default",
			"impersonation": "Caller", "identity": adminName(), "authenticated-as": subject,
		},
	}
	match := map[string]func(a map[string]string) bool{
		"get":    func(a map[string]string) bool { return a["inner-name"] == cm && a["inner-verb"] == "get" },
		"delete": func(a map[string]string) bool { return a["inner-name"] == cm && a["inner-verb"] == "delete" },
		"exec": func(a map[string]string) bool {
			return a["inner-subresource"] == "exec" && a["cluster"] == m.GatewayName
		},
		"caller": func(a map[string]string) bool { return a["cluster"] == caller.Name && a["inner-name"] == "default" },
	}
	var found map[string]auditEvent
	eventually(t, "the audit log has an event for each request", func() error {
		events, err := readAuditLog(logPath)
		if err != nil {
			return err
		}
		found = map[string]auditEvent{}
		for _, ev := range events {
			a := trimPrefix(ev.Annotations)
			for what, ok := range match {
				if _, seen := found[what]; !seen && ev.Stage == "ResponseComplete" && ok(a) {
					found[what] = ev
				}
			}
		}
		if len(found) != len(match) {
			return fmt.Errorf("found %d of %d events (%d in the log)", len(found), len(match), len(events))
		}
		return nil
	})
	for what, ev := range found {
		got := trimPrefix(ev.Annotations)
		if !maps.Equal(got, want[what]) {
			t.Errorf("%s: audit annotations\n got %v\nwant %v\n(event %s %s by %s)", what, got, want[what], ev.Verb, ev.RequestURI, ev.User.Username)
		}
		if ev.ObjectRef.Resource != "clustergateways" || ev.ObjectRef.Subresource != "proxy" {
			t.Errorf("%s: the event is for %s/%s, want clustergateways/proxy", what, ev.ObjectRef.Resource, ev.ObjectRef.Subresource)
		}
		t.Logf("%s: %s %s: %v", what, ev.Verb, ev.RequestURI, got)
	}
	raw, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	requireNoMaterial(t, "the audit log", string(raw), m.GatewayUser.KeyPEM, m.GatewayUser.CertPEM)
}

// readAuditLog parses the JSON lines of an audit log.
func readAuditLog(path string) ([]auditEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []auditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev auditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("audit log line %q: %v", sc.Text(), err)
		}
		out = append(out, ev)
	}
	return out, sc.Err()
}

// trimPrefix keeps the gateway's annotations, without their prefix.
func trimPrefix(a map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		if s, ok := strings.CutPrefix(k, auditPrefix); ok {
			out[s] = v
		}
	}
	return out
}

// certSubject is a PEM certificate's subject as status.credential.subject shows it.
func certSubject(t *testing.T, certPEM []byte) string {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatal("no PEM certificate")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.Subject.String()
}
