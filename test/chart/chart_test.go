// Package chart checks that charts/cluster-gateway renders what config/ holds,
// and each of its serving-certificate modes and values, with the real helm and
// kubectl (kustomize) binaries that `make tools` builds; and that the metrics
// its alerts use are served by a running gateway (alerts_test.go), in the
// local environment of hack/localenv.
//
//	KUBE_BIN  directory with helm and kubectl, and for the alerts etcd,
//	          kube-apiserver, proxy-server, proxy-agent and cluster-gateway
//	          (`make tools build`; default ../../_output/bin)
package chart

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	apiserveroptions "k8s.io/apiserver/pkg/server/options"
	"sigs.k8s.io/yaml"
)

const (
	chartDir  = "../../charts/cluster-gateway"
	configDir = "../../config"
	release   = "cluster-gateway"
	namespace = "cluster-gateway-system"
)

func bin(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("KUBE_BIN")
	if dir == "" {
		dir = filepath.Join("..", "..", "_output", "bin")
	}
	p, err := filepath.Abs(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is missing: run `make tools` (or set KUBE_BIN to a directory that has it)", p)
	}
	return p
}

func run(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin(t, name), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Only the files given: no kubeconfig or helm state of whoever runs this.
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "KUBECONFIG=/dev/null")
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

type object = map[string]any

// key is kind/namespace/name.
func key(o object) string {
	m, _ := o["metadata"].(object)
	ns, _ := m["namespace"].(string)
	name, _ := m["name"].(string)
	return fmt.Sprintf("%s/%s/%s", o["kind"], ns, name)
}

func parse(t *testing.T, manifests string) map[string]object {
	t.Helper()
	out := map[string]object{}
	for _, doc := range strings.Split(manifests, "\n---") {
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("parse %q: %v", doc, err)
		}
		if o == nil {
			continue
		}
		if _, dup := out[key(o)]; dup {
			t.Fatalf("%s rendered twice", key(o))
		}
		out[key(o)] = o
	}
	return out
}

// helmTemplate renders the chart as release "cluster-gateway" in cluster-gateway-system.
func helmTemplate(t *testing.T, set ...string) map[string]object {
	t.Helper()
	out, err := helmTemplateErr(t, set...)
	if err != nil {
		t.Fatal(err)
	}
	return parse(t, out)
}

func helmTemplateErr(t *testing.T, set ...string) (string, error) {
	args := []string{"template", release, chartDir, "--namespace", namespace}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return run(t, "helm", args...)
}

// helmLabels are what the chart adds to config/'s labels.
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by"}

func normalize(o object) object {
	b, _ := yaml.Marshal(o)
	var c object
	_ = yaml.Unmarshal(b, &c)
	if labels, ok := c["metadata"].(object)["labels"].(object); ok {
		for _, l := range helmLabels {
			delete(labels, l)
		}
	}
	// The installer (or cert-manager) sets config/'s caBundle; the chart has it by mode.
	if c["kind"] == "APIService" {
		delete(c["spec"].(object), "caBundle")
	}
	return c
}

// The chart with its defaults, serving certificate from an existing Secret,
// renders exactly config/'s objects, field by field (helm's own labels and
// the APIService's caBundle aside); config/ alone has the Namespace, which
// `helm install --create-namespace` makes.
func TestChartRendersConfig(t *testing.T) {
	kustomized, err := run(t, "kubectl", "kustomize", configDir)
	if err != nil {
		t.Fatal(err)
	}
	config := parse(t, kustomized)
	chart := helmTemplate(t, "tls.mode=existingSecret", "tls.caBundle="+base64.StdEncoding.EncodeToString([]byte("CA")))
	sameObjects(t, config, chart)
	if ca := chart["APIService//v1alpha1.gateway.clustergateway.io"]["spec"].(object)["caBundle"]; ca != base64.StdEncoding.EncodeToString([]byte("CA")) {
		t.Errorf("existingSecret: APIService caBundle %v, want tls.caBundle", ca)
	}
}

// sameObjects fails unless the chart rendered config/'s objects, field by
// field (helm's own labels and the APIService's caBundle aside), but for
// config/'s Namespace.
func sameObjects(t *testing.T, config, chart map[string]object) {
	t.Helper()
	var onlyConfig, onlyChart []string
	for k := range config {
		if _, ok := chart[k]; !ok && k != "Namespace//"+namespace {
			onlyConfig = append(onlyConfig, k)
		}
	}
	for k := range chart {
		if _, ok := config[k]; !ok {
			onlyChart = append(onlyChart, k)
		}
	}
	sort.Strings(onlyConfig)
	sort.Strings(onlyChart)
	if len(onlyConfig) > 0 || len(onlyChart) > 0 {
		t.Errorf("objects only in config/: %v; only in the chart: %v", onlyConfig, onlyChart)
	}
	if len(chart) != len(config)-1 {
		t.Errorf("the chart rendered %d objects, want config/'s %d besides the Namespace: %v", len(chart), len(config)-1, keys(chart))
	}
	for k, c := range chart {
		want, ok := config[k]
		if !ok {
			continue
		}
		got, wantN := normalize(c), normalize(want)
		if !reflect.DeepEqual(got, wantN) {
			g, _ := yaml.Marshal(got)
			w, _ := yaml.Marshal(wantN)
			t.Errorf("%s differs.\nchart:\n%s\nconfig/:\n%s", k, g, w)
		}
	}
}

func keys(m map[string]object) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func field(t *testing.T, o object, path ...string) any {
	t.Helper()
	var cur any = o
	for _, p := range path {
		m, ok := cur.(object)
		if !ok {
			t.Fatalf("%s: no %s", key(o), strings.Join(path, "."))
		}
		cur = m[p]
	}
	return cur
}

func podSpec(t *testing.T, objs map[string]object) object {
	t.Helper()
	d, ok := objs["Deployment/"+namespace+"/"+release]
	if !ok {
		t.Fatalf("no Deployment in %v", keys(objs))
	}
	return field(t, d, "spec", "template", "spec").(object)
}

func container(t *testing.T, objs map[string]object) object {
	t.Helper()
	return podSpec(t, objs)["containers"].([]any)[0].(object)
}

func args(t *testing.T, objs map[string]object) []string {
	t.Helper()
	var out []string
	for _, a := range container(t, objs)["args"].([]any) {
		out = append(out, a.(string))
	}
	return out
}

func decode(t *testing.T, b64 any) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(b64.(string))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Default mode: the chart generates a CA and a serving certificate that the
// hub's aggregator accepts: the APIService's caBundle is the Secret's CA, which
// signs a certificate for <service>.<namespace>.svc that matches its key, in
// the Secret the Deployment mounts.
func TestChartGeneratesTheServingCertificate(t *testing.T) {
	objs := helmTemplate(t)
	secret, ok := objs["Secret/"+namespace+"/cluster-gateway-tls"]
	if !ok {
		t.Fatalf("no Secret cluster-gateway-tls in %v", keys(objs))
	}
	if secret["type"] != "kubernetes.io/tls" {
		t.Errorf("Secret type %v, want kubernetes.io/tls", secret["type"])
	}
	data := secret["data"].(object)
	caPEM, crtPEM, keyPEM := decode(t, data["ca.crt"]), decode(t, data["tls.crt"]), decode(t, data["tls.key"])
	apisvc := objs["APIService//v1alpha1.gateway.clustergateway.io"]
	if !bytes.Equal(decode(t, field(t, apisvc, "spec", "caBundle")), caPEM) {
		t.Errorf("the APIService's caBundle is not the generated CA")
	}
	if _, err := tls.X509KeyPair(crtPEM, keyPEM); err != nil {
		t.Errorf("generated certificate and key: %v", err)
	}
	block, _ := pem.Decode(crtPEM)
	if block == nil {
		t.Fatal("tls.crt holds no PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.crt holds no certificate")
	}
	svc := field(t, apisvc, "spec", "service").(object)
	dnsName := fmt.Sprintf("%s.%s.svc", svc["name"], svc["namespace"])
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: dnsName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("the serving certificate does not verify for %s with the caBundle: %v", dnsName, err)
	}
	vol := podSpec(t, objs)["volumes"].([]any)[0].(object)
	if field(t, vol, "secret", "secretName") != "cluster-gateway-tls" {
		t.Errorf("the Deployment mounts %v, want cluster-gateway-tls", vol)
	}
}

// cert-manager mode: a Certificate for the service names into the Secret the
// Deployment mounts, and the CA-injection annotation on the APIService instead
// of a caBundle; with an issuerRef, only that Certificate.
func TestChartCertManager(t *testing.T) {
	objs := helmTemplate(t, "tls.mode=certManager")
	apisvc := objs["APIService//v1alpha1.gateway.clustergateway.io"]
	if got := field(t, apisvc, "metadata", "annotations").(object)["cert-manager.io/inject-ca-from"]; got != namespace+"/cluster-gateway-tls" {
		t.Errorf("inject-ca-from = %v, want %s/cluster-gateway-tls", got, namespace)
	}
	if ca, ok := apisvc["spec"].(object)["caBundle"]; ok {
		t.Errorf("caBundle %v set; cert-manager injects it", ca)
	}
	cert, ok := objs["Certificate/"+namespace+"/cluster-gateway-tls"]
	if !ok {
		t.Fatalf("no Certificate cluster-gateway-tls in %v", keys(objs))
	}
	if field(t, cert, "spec", "secretName") != "cluster-gateway-tls" {
		t.Errorf("Certificate secretName %v", field(t, cert, "spec", "secretName"))
	}
	dns := fmt.Sprint(field(t, cert, "spec", "dnsNames"))
	if !strings.Contains(dns, "cluster-gateway.cluster-gateway-system.svc ") {
		t.Errorf("dnsNames %s lack cluster-gateway.cluster-gateway-system.svc", dns)
	}
	for _, k := range []string{"Issuer/" + namespace + "/cluster-gateway-selfsigned", "Certificate/" + namespace + "/cluster-gateway-ca", "Issuer/" + namespace + "/cluster-gateway-ca"} {
		if _, ok := objs[k]; !ok {
			t.Errorf("no %s (the self-signed CA chain) in %v", k, keys(objs))
		}
	}
	if field(t, cert, "spec", "issuerRef").(object)["name"] != "cluster-gateway-ca" {
		t.Errorf("issuerRef %v, want the chart's CA issuer", field(t, cert, "spec", "issuerRef"))
	}
	if _, ok := objs["Secret/"+namespace+"/cluster-gateway-tls"]; ok {
		t.Errorf("a Secret is rendered; cert-manager writes it")
	}

	objs = helmTemplate(t, "tls.mode=certManager", "tls.certManager.issuerRef.kind=ClusterIssuer", "tls.certManager.issuerRef.name=corp-ca")
	for k := range objs {
		if strings.HasPrefix(k, "Issuer/") || k == "Certificate/"+namespace+"/cluster-gateway-ca" {
			t.Errorf("with an issuerRef, %s is rendered", k)
		}
	}
	ref := field(t, objs["Certificate/"+namespace+"/cluster-gateway-tls"], "spec", "issuerRef").(object)
	if ref["kind"] != "ClusterIssuer" || ref["name"] != "corp-ca" {
		t.Errorf("issuerRef %v, want ClusterIssuer corp-ca", ref)
	}
}

func TestChartValues(t *testing.T) {
	def := helmTemplate(t)
	if got := container(t, def)["image"]; got != "ghcr.io/clustergateway/cluster-gateway:v0.1.0" {
		t.Errorf("default image %v, want the appVersion v0.1.0", got)
	}
	if got := field(t, def["Deployment/"+namespace+"/"+release], "spec", "replicas"); got != float64(2) {
		t.Errorf("default replicas %v, want 2", got)
	}
	if got := podSpec(t, def)["terminationGracePeriodSeconds"]; got != float64(90) {
		t.Errorf("default terminationGracePeriodSeconds %v, want 90", got)
	}
	if _, ok := field(t, podSpec(t, def), "affinity", "podAntiAffinity").(object)["preferredDuringSchedulingIgnoredDuringExecution"]; !ok {
		t.Errorf("default anti-affinity is not preferred: %v", podSpec(t, def)["affinity"])
	}
	if pdb := def["PodDisruptionBudget/"+namespace+"/"+release]; pdb == nil || field(t, pdb, "spec", "maxUnavailable") != float64(1) {
		t.Errorf("default PodDisruptionBudget: %v", pdb)
	}

	objs := helmTemplate(t,
		"replicaCount=3", "image.repository=registry.example/cgw", "image.tag=v0.2.0",
		"resources.limits.memory=512Mi", "priorityClassName=system-cluster-critical",
		"terminationGracePeriodSeconds=120", "podAntiAffinity=hard", "podDisruptionBudget.enabled=false",
		"secretNamespace=gateways", "gateway.authorizeProxySubpath=true", "gateway.dialTimeout=5s", "gateway.logFormat=json",
		"gateway.konnectivity.enabled=true", "gateway.konnectivity.serverAddress=konnectivity.kube-system.svc:8090",
		"gateway.konnectivity.secretName=konnectivity-client", "gateway.extraArgs={--pool-capacity=50,--v=2}",
		"userRoles.create=false", "gateway.endpoints.denyCIDRs={169.254.0.0/16}", "gateway.endpoints.allowCIDRs={10.0.0.0/8,192.168.0.0/16}",
	)
	c := container(t, objs)
	if c["image"] != "registry.example/cgw:v0.2.0" || field(t, c, "resources", "limits", "memory") != "512Mi" {
		t.Errorf("image %v, resources %v", c["image"], c["resources"])
	}
	ps := podSpec(t, objs)
	if ps["priorityClassName"] != "system-cluster-critical" || ps["terminationGracePeriodSeconds"] != float64(120) {
		t.Errorf("priorityClassName %v, terminationGracePeriodSeconds %v", ps["priorityClassName"], ps["terminationGracePeriodSeconds"])
	}
	if _, ok := field(t, ps, "affinity", "podAntiAffinity").(object)["requiredDuringSchedulingIgnoredDuringExecution"]; !ok {
		t.Errorf("podAntiAffinity=hard: %v", ps["affinity"])
	}
	if got := field(t, objs["Deployment/"+namespace+"/"+release], "spec", "replicas"); got != float64(3) {
		t.Errorf("replicas %v", got)
	}
	wantArgs := []string{
		"--secure-port=8443", "--tls-cert-file=/etc/cluster-gateway/tls/tls.crt", "--tls-private-key-file=/etc/cluster-gateway/tls/tls.key",
		"--secret-namespace=gateways", "--endpoint-deny-cidrs=169.254.0.0/16", "--endpoint-allow-cidrs=10.0.0.0/8,192.168.0.0/16",
		"--shutdown-delay-duration=5s", "--shutdown-stream-drain=20s",
		"--authorize-proxy-subpath", "--dial-timeout=5s", "--logging-format=json",
		"--konnectivity-server-address=konnectivity.kube-system.svc:8090", "--konnectivity-ca-file=/etc/cluster-gateway/konnectivity/ca.crt",
		"--konnectivity-cert-file=/etc/cluster-gateway/konnectivity/tls.crt", "--konnectivity-key-file=/etc/cluster-gateway/konnectivity/tls.key",
		"--pool-capacity=50", "--v=2",
	}
	if got := args(t, objs); !reflect.DeepEqual(got, wantArgs) {
		t.Errorf("args\n%v\nwant\n%v", got, wantArgs)
	}
	if fmt.Sprint(ps["volumes"]) == fmt.Sprint(podSpec(t, def)["volumes"]) || !strings.Contains(fmt.Sprint(ps["volumes"]), "konnectivity-client") {
		t.Errorf("konnectivity Secret not mounted: %v", ps["volumes"])
	}
	for _, k := range []string{"Role/gateways/" + release, "RoleBinding/gateways/" + release} {
		if _, ok := objs[k]; !ok {
			t.Errorf("secretNamespace=gateways: no %s in %v", k, keys(objs))
		}
	}
	for _, k := range []string{"PodDisruptionBudget/" + namespace + "/" + release, "ClusterRole//cluster-gateway:viewer", "ClusterRole//cluster-gateway:proxy", "ClusterRole//cluster-gateway:proxy-reader"} {
		if _, ok := objs[k]; ok {
			t.Errorf("%s rendered although disabled", k)
		}
	}

	for _, c := range []struct {
		set  []string
		want string
	}{
		{[]string{"image.tag=latest"}, "image.tag must be a version, not latest"},
		{[]string{"tls.mode=existingSecret"}, "tls.caBundle"},
		{[]string{"tls.mode=selfsigned"}, "tls.mode must be generate, certManager or existingSecret"},
		{[]string{"gateway.konnectivity.enabled=true"}, "needs gateway.konnectivity.serverAddress"},
		{[]string{"serviceAccount.create=false"}, "serviceAccount.name is required"},
	} {
		if _, err := helmTemplateErr(t, c.set...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--set %v: err %v, want it to say %q", c.set, err, c.want)
		}
	}
}

// credentialSourceNamespaces passes --credential-source-namespaces and gives
// the gateway read-only access to Secrets in each namespace (a Role and a
// RoleBinding there), and nothing in its own namespace, where it already
// manages Secrets; config/components/credential-sources renders the same.
func TestChartCredentialSourceNamespaces(t *testing.T) {
	objs := helmTemplate(t, "credentialSourceNamespaces={capi-clusters,ocm,"+namespace+",ocm}")
	var flags []string
	for _, a := range args(t, objs) {
		if strings.HasPrefix(a, "--credential-source-namespaces") {
			flags = append(flags, a)
		}
	}
	if want := []string{"--credential-source-namespaces=capi-clusters,ocm"}; !reflect.DeepEqual(flags, want) {
		t.Errorf("flags %v, want %v (the gateway's own namespace and repeats left out)", flags, want)
	}
	wantRules := []any{object{"apiGroups": []any{""}, "resources": []any{"secrets"}, "verbs": []any{"get", "list", "watch"}}}
	for _, ns := range []string{"capi-clusters", "ocm"} {
		role, ok := objs["Role/"+ns+"/"+release+":credential-source"]
		if !ok {
			t.Errorf("no Role in %s: %v", ns, keys(objs))
			continue
		}
		if !reflect.DeepEqual(role["rules"], wantRules) {
			t.Errorf("Role in %s: rules %v, want get, list and watch on secrets only", ns, role["rules"])
		}
		rb, ok := objs["RoleBinding/"+ns+"/"+release+":credential-source"]
		if !ok {
			t.Errorf("no RoleBinding in %s: %v", ns, keys(objs))
			continue
		}
		wantRef := object{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": release + ":credential-source"}
		wantSubjects := []any{object{"kind": "ServiceAccount", "name": release, "namespace": namespace}}
		if !reflect.DeepEqual(rb["roleRef"], wantRef) || !reflect.DeepEqual(rb["subjects"], wantSubjects) {
			t.Errorf("RoleBinding in %s: roleRef %v subjects %v, want the Role bound to the gateway's ServiceAccount", ns, rb["roleRef"], rb["subjects"])
		}
	}
	if _, ok := objs["Role/"+namespace+"/"+release+":credential-source"]; ok {
		t.Errorf("a credential-source Role in the gateway's own namespace, which its own Role covers")
	}
	if n := len(objs) - len(helmTemplate(t)); n != 4 {
		t.Errorf("%d objects more than the defaults, want 4 (a Role and a RoleBinding in each of 2 namespaces)", n)
	}

	for _, bad := range []string{"Bad_NS", ""} {
		if _, err := helmTemplateErr(t, "credentialSourceNamespaces={"+bad+"}"); err == nil || !strings.Contains(err.Error(), "is not a namespace name") {
			t.Errorf("credentialSourceNamespaces={%s}: err %v, want the namespace refused", bad, err)
		}
	}

	// config/ with its credential-sources component (for capi-clusters) is
	// what the chart renders for that namespace.
	overlay := t.TempDir()
	abs, err := filepath.Abs(configDir)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(overlay, abs) // kustomize takes no absolute paths
	if err != nil {
		t.Fatal(err)
	}
	k := fmt.Sprintf("resources: [%s]\ncomponents: [%s/components/credential-sources]\n", rel, rel)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o600); err != nil {
		t.Fatal(err)
	}
	kustomized, err := run(t, "kubectl", "kustomize", overlay)
	if err != nil {
		t.Fatal(err)
	}
	sameObjects(t, parse(t, kustomized), helmTemplate(t, "tls.mode=existingSecret", "tls.caBundle=Q0E=", "credentialSourceNamespaces={capi-clusters}"))
}

// The inventory sync and credential source namespaces: off by default;
// switched on, the flags, a Role per source namespace (Secrets, and
// ClusterProfiles for that sync) and the sync's Role, field by field as
// config/inventory-sync/ has it.
func TestChartInventorySync(t *testing.T) {
	def := helmTemplate(t)
	for k := range def {
		if strings.Contains(k, "inventory-sync") || strings.Contains(k, "credential-source") {
			t.Errorf("%s rendered with the defaults", k)
		}
	}
	objs := helmTemplate(t, "credentialSourceNamespaces={capi-a,fleet}", "inventorySync.capi=true",
		"inventorySync.clusterProfile=true", "inventorySync.providers={eks,gke}")
	got := args(t, objs)
	for _, want := range []string{"--credential-source-namespaces=capi-a,fleet", "--inventory-sync=capi,clusterprofile", "--inventory-sync-providers=eks,gke"} {
		if !slices.Contains(got, want) {
			t.Errorf("args %v lack %s", got, want)
		}
	}
	for _, ns := range []string{"capi-a", "fleet"} {
		role := objs["Role/"+ns+"/"+release+":credential-source"]
		if role == nil || objs["RoleBinding/"+ns+"/"+release+":credential-source"] == nil {
			t.Fatalf("no Role and RoleBinding for source namespace %s in %v", ns, keys(objs))
		}
		if rules := fmt.Sprint(role["rules"]); !strings.Contains(rules, "secrets") || !strings.Contains(rules, "clusterprofiles") || strings.Contains(rules, "create") {
			t.Errorf("source namespace %s rules %s: want get, list and watch on secrets and list and watch on clusterprofiles only", ns, rules)
		}
	}
	kustomized, err := run(t, "kubectl", "kustomize", configDir+"/inventory-sync")
	if err != nil {
		t.Fatal(err)
	}
	config := parse(t, kustomized)
	for _, k := range []string{"Role/" + namespace + "/cluster-gateway:inventory-sync", "RoleBinding/" + namespace + "/cluster-gateway:inventory-sync"} {
		want, ok := config[k]
		if !ok {
			t.Fatalf("config/inventory-sync has no %s: %v", k, keys(config))
		}
		if got := normalize(objs[k]); !reflect.DeepEqual(got, normalize(want)) {
			t.Errorf("%s: the chart renders\n%v\nconfig/inventory-sync has\n%v", k, got, normalize(want))
		}
	}
	capiOnly := helmTemplate(t, "credentialSourceNamespaces={capi-a}", "inventorySync.capi=true")
	for _, k := range []string{"Role/capi-a/" + release + ":credential-source", "Role/" + namespace + "/" + release + ":inventory-sync"} {
		if rules := fmt.Sprint(capiOnly[k]["rules"]); capiOnly[k] == nil || strings.Contains(rules, "clusterprofiles") {
			t.Errorf("capi only: %s rules %s, want it without clusterprofiles", k, rules)
		}
	}
	if _, err := helmTemplateErr(t, "inventorySync.clusterProfile=true"); err == nil || !strings.Contains(err.Error(), "needs credential providers: pass --credential-providers-file") {
		t.Errorf("clusterProfile without providers: err %v, want it to say it needs providers", err)
	}
	// Every provider of the gateway's providers file, without the list.
	if _, err := helmTemplateErr(t, "inventorySync.clusterProfile=true", "gateway.extraArgs={--credential-providers-file=/etc/cluster-gateway/providers.yaml}"); err != nil {
		t.Errorf("clusterProfile with a providers file and no list: %v", err)
	}
}

// The ClusterProfile publisher: off by default; switched on, its flags, the
// hub CA in a ConfigMap mounted where the flag points, the Lease Role, and a
// Role in publish.namespace rule for rule as config/publish/ has it (create,
// delete, list, watch on profiles, patch on their status, nothing else);
// with the ClusterProfile sync, patch on profiles' status in each source
// namespace too.
func TestChartPublish(t *testing.T) {
	for k := range helmTemplate(t) {
		if strings.Contains(k, "publish") {
			t.Errorf("%s rendered with the defaults", k)
		}
	}
	if out, err := helmTemplateErr(t, "publish.enabled=true", "publish.namespace=fleet"); err == nil || !strings.Contains(out+fmt.Sprint(err), "publish.hubServer is required") {
		t.Errorf("publish without hubServer: %v\n%s", err, out)
	}
	objs := helmTemplate(t, "publish.enabled=true", "publish.namespace=fleet", "publish.hubServer=https://hub:6443",
		"publish.hubCA=PEM", "publish.gatewaySelector=tier=prod", "credentialSourceNamespaces={inv}",
		"inventorySync.clusterProfile=true", "inventorySync.providers={eks}")
	got := args(t, objs)
	for _, want := range []string{"--publish-clusterprofiles", "--publish-namespace=fleet", "--publish-hub-server=https://hub:6443",
		"--publish-provider-name=cluster-gateway", "--publish-gateway-selector=tier=prod", "--publish-hub-ca-file=/etc/cluster-gateway/publish/ca.crt"} {
		if !slices.Contains(got, want) {
			t.Errorf("args %v lack %s", got, want)
		}
	}
	if cm := objs["ConfigMap/"+namespace+"/"+release+"-publish-hub-ca"]; cm == nil || !strings.Contains(fmt.Sprint(cm["data"]), "PEM") {
		t.Errorf("hub CA ConfigMap: %v", cm)
	}
	if rules := fmt.Sprint(objs["Role/inv/"+release+":credential-source"]["rules"]); !strings.Contains(rules, "clusterprofiles/status") {
		t.Errorf("source namespace rules %s: want patch on clusterprofiles/status", rules)
	}
	if objs["Role/"+namespace+"/"+release+":inventory-sync"] == nil {
		t.Errorf("no Lease Role in %v", keys(objs))
	}
	raw, err := os.ReadFile(configDir + "/publish/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	config := parse(t, strings.ReplaceAll(string(raw), "namespace: clusterprofiles", "namespace: fleet"))
	want := config["Role/fleet/cluster-gateway:publish"]
	role := objs["Role/fleet/"+release+":publish"]
	if want == nil || role == nil || objs["RoleBinding/fleet/"+release+":publish"] == nil {
		t.Fatalf("publish Role: chart %v, config %v", keys(objs), keys(config))
	}
	if g, w := fmt.Sprint(role["rules"]), fmt.Sprint(want["rules"]); g != w {
		t.Errorf("publish Role rules: the chart renders %s, config/publish has %s", g, w)
	}
}

// Tracing: off by default; with an endpoint, a TracingConfiguration in a
// ConfigMap that k8s.io/apiserver's own reader accepts, with the endpoint and
// rate given, mounted where --tracing-config-file points.
func TestChartTracing(t *testing.T) {
	for k := range helmTemplate(t) {
		if strings.Contains(k, "tracing") {
			t.Errorf("%s rendered with the defaults", k)
		}
	}
	for _, a := range args(t, helmTemplate(t)) {
		if strings.HasPrefix(a, "--tracing") {
			t.Errorf("tracing flag %s with the defaults", a)
		}
	}
	objs := helmTemplate(t, "gateway.tracing.endpoint=otel-collector.monitoring:4317", "gateway.tracing.samplingRatePerMillion=250")
	const flag = "--tracing-config-file=/etc/cluster-gateway/tracing/tracing.yaml"
	if !slices.Contains(args(t, objs), flag) {
		t.Errorf("args %v lack %s", args(t, objs), flag)
	}
	cm := objs["ConfigMap/"+namespace+"/"+release+"-tracing"]
	if cm == nil {
		t.Fatalf("no tracing ConfigMap in %v", keys(objs))
	}
	file := filepath.Join(t.TempDir(), "tracing.yaml")
	if err := os.WriteFile(file, []byte(cm["data"].(object)["tracing.yaml"].(string)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := apiserveroptions.ReadTracingConfiguration(file)
	if err != nil {
		t.Fatalf("the rendered TracingConfiguration: %v", err)
	}
	if cfg.Endpoint == nil || *cfg.Endpoint != "otel-collector.monitoring:4317" || cfg.SamplingRatePerMillion == nil || *cfg.SamplingRatePerMillion != 250 {
		t.Errorf("TracingConfiguration %+v: want endpoint otel-collector.monitoring:4317, 250 per million", cfg)
	}
	mounted := false
	for _, m := range container(t, objs)["volumeMounts"].([]any) {
		mounted = mounted || m.(object)["name"] == "tracing" && m.(object)["mountPath"] == "/etc/cluster-gateway/tracing"
	}
	vol := strings.Contains(fmt.Sprint(podSpec(t, objs)["volumes"]), release+"-tracing")
	if !mounted || !vol {
		t.Errorf("the tracing ConfigMap is not mounted at /etc/cluster-gateway/tracing (mount %v, volume %v)", mounted, vol)
	}
}
