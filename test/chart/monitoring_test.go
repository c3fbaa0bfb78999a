package chart

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const metricsReader = "cluster-gateway:metrics-reader"

// Monitoring and the NetworkPolicy are off by default: nothing of theirs is
// rendered (TestChartRendersConfig also holds the defaults to config/).
func TestChartMonitoringOffByDefault(t *testing.T) {
	for k := range helmTemplate(t) {
		kind := strings.SplitN(k, "/", 2)[0]
		if kind == "ServiceMonitor" || kind == "PrometheusRule" || kind == "NetworkPolicy" || strings.Contains(k, metricsReader) {
			t.Errorf("%s rendered with the defaults", k)
		}
	}
}

// The ServiceMonitor scrapes the gateway Service's https port at /metrics,
// verifying the serving certificate for the Service's DNS name with the CA
// that signs it, with a bearer token; the ClusterRole allows get on
// /metrics and nothing else, bound to the subjects given.
func TestChartServiceMonitor(t *testing.T) {
	subjects := []string{"serviceMonitor.scraperSubjects[0].kind=ServiceAccount",
		"serviceMonitor.scraperSubjects[0].name=prometheus-k8s", "serviceMonitor.scraperSubjects[0].namespace=monitoring"}
	objs := helmTemplate(t, append([]string{"serviceMonitor.enabled=true", "serviceMonitor.labels.release=kube-prometheus-stack",
		"konnectivityServer.enabled=true", "konnectivityServer.secretName=s", "gateway.konnectivity.enabled=true",
		"gateway.konnectivity.secretName=c"}, subjects...)...)
	sm := objs["ServiceMonitor/"+namespace+"/"+release]
	if sm == nil {
		t.Fatalf("no ServiceMonitor in %v", keys(objs))
	}
	if field(t, sm, "metadata", "labels").(object)["release"] != "kube-prometheus-stack" {
		t.Errorf("ServiceMonitor labels %v lack serviceMonitor.labels", field(t, sm, "metadata", "labels"))
	}
	// It selects the gateway's Service alone among those with its port.
	sel := field(t, sm, "spec", "selector", "matchLabels").(object)
	var scraped []string
	for k, o := range objs {
		if !strings.HasPrefix(k, "Service/") || !matches(sel, o) {
			continue
		}
		for _, p := range field(t, o, "spec", "ports").([]any) {
			if p.(object)["name"] == "https" {
				scraped = append(scraped, k)
			}
		}
	}
	if want := []string{"Service/" + namespace + "/" + release}; !reflect.DeepEqual(scraped, want) {
		t.Errorf("the ServiceMonitor scrapes the https port of %v, want %v", scraped, want)
	}
	if ns := field(t, sm, "spec", "namespaceSelector", "matchNames"); !reflect.DeepEqual(ns, []any{namespace}) {
		t.Errorf("namespaceSelector %v, want the release namespace", ns)
	}
	eps := field(t, sm, "spec", "endpoints").([]any)
	if len(eps) != 1 {
		t.Fatalf("endpoints %v, want one", eps)
	}
	ep := eps[0].(object)
	if ep["port"] != "https" || ep["scheme"] != "https" || ep["path"] != "/metrics" || ep["interval"] != "30s" {
		t.Errorf("endpoint %v, want port https, scheme https, path /metrics, interval 30s", ep)
	}
	if ep["bearerTokenFile"] != "/var/run/secrets/kubernetes.io/serviceaccount/token" || ep["authorization"] != nil {
		t.Errorf("endpoint %v: want Prometheus' ServiceAccount token (bearerTokenFile)", ep)
	}
	tlsCfg := ep["tlsConfig"].(object)
	if _, ok := tlsCfg["insecureSkipVerify"]; ok {
		t.Errorf("tlsConfig %v skips verification", tlsCfg)
	}
	serverName := tlsCfg["serverName"].(string)
	if want := release + "." + namespace + ".svc"; serverName != want {
		t.Errorf("tlsConfig.serverName %q, want %q", serverName, want)
	}
	// The CA it names verifies the certificate the Deployment serves, for serverName.
	ca := field(t, sm, "spec", "endpoints").([]any)[0].(object)["tlsConfig"].(object)["ca"].(object)["secret"].(object)
	mounted := field(t, podSpec(t, objs)["volumes"].([]any)[0].(object), "secret", "secretName")
	if ca["name"] != mounted || ca["key"] != "ca.crt" {
		t.Fatalf("tlsConfig.ca.secret %v, want ca.crt of the mounted Secret %v", ca, mounted)
	}
	data := objs["Secret/"+namespace+"/"+mounted.(string)]["data"].(object)
	verifyServing(t, decode(t, data["ca.crt"]), decode(t, data["tls.crt"]), serverName)

	role := objs["ClusterRole//"+metricsReader]
	wantRules := []any{object{"nonResourceURLs": []any{"/metrics"}, "verbs": []any{"get"}}}
	if role == nil || !reflect.DeepEqual(role["rules"], wantRules) {
		t.Errorf("ClusterRole %s: %v, want get on /metrics only", metricsReader, role)
	}
	rb := objs["ClusterRoleBinding//"+metricsReader]
	wantSubjects := []any{object{"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}}
	if rb == nil || !reflect.DeepEqual(rb["subjects"], wantSubjects) ||
		!reflect.DeepEqual(rb["roleRef"], object{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": metricsReader}) {
		t.Errorf("ClusterRoleBinding %s: %v, want the ClusterRole bound to %v", metricsReader, rb, wantSubjects)
	}

	// No subjects: no binding. A token from a Secret instead of the file.
	objs = helmTemplate(t, "serviceMonitor.enabled=true", "serviceMonitor.authorization.type=Bearer",
		"serviceMonitor.authorization.credentials.name=prom-token", "serviceMonitor.authorization.credentials.key=token")
	if _, ok := objs["ClusterRoleBinding//"+metricsReader]; ok {
		t.Errorf("a ClusterRoleBinding without scraperSubjects")
	}
	ep = field(t, objs["ServiceMonitor/"+namespace+"/"+release], "spec", "endpoints").([]any)[0].(object)
	if _, ok := ep["bearerTokenFile"]; ok || field(t, ep, "authorization", "credentials").(object)["name"] != "prom-token" {
		t.Errorf("with serviceMonitor.authorization: endpoint %v, want authorization and no bearerTokenFile", ep)
	}
	if _, err := helmTemplateErr(t, "serviceMonitor.enabled=true", "serviceMonitor.bearerTokenFile="); err == nil ||
		!strings.Contains(err.Error(), "serviceMonitor.bearerTokenFile or serviceMonitor.authorization is required") {
		t.Errorf("a ServiceMonitor without credentials: err %v, want it refused", err)
	}
}

// The CA Prometheus verifies with in the other serving-certificate modes:
// cert-manager's ca.crt in the certificate's Secret; for an existing
// Secret, a ConfigMap of tls.caBundle.
func TestChartServiceMonitorCA(t *testing.T) {
	objs := helmTemplate(t, "serviceMonitor.enabled=true", "tls.mode=certManager")
	ca := field(t, objs["ServiceMonitor/"+namespace+"/"+release], "spec", "endpoints").([]any)[0].(object)["tlsConfig"].(object)["ca"]
	if want := (object{"secret": object{"name": release + "-tls", "key": "ca.crt"}}); !reflect.DeepEqual(ca, want) {
		t.Errorf("certManager: tlsConfig.ca %v, want %v", ca, want)
	}
	if got := field(t, objs["Certificate/"+namespace+"/"+release+"-tls"], "spec", "secretName"); got != release+"-tls" {
		t.Errorf("certManager: the Certificate writes %v, not the Secret the ServiceMonitor reads", got)
	}

	caPEM := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	objs = helmTemplate(t, "serviceMonitor.enabled=true", "tls.mode=existingSecret", "tls.caBundle="+base64.StdEncoding.EncodeToString(caPEM))
	ca = field(t, objs["ServiceMonitor/"+namespace+"/"+release], "spec", "endpoints").([]any)[0].(object)["tlsConfig"].(object)["ca"]
	if want := (object{"configMap": object{"name": release + "-ca", "key": "ca.crt"}}); !reflect.DeepEqual(ca, want) {
		t.Errorf("existingSecret: tlsConfig.ca %v, want %v", ca, want)
	}
	cm := objs["ConfigMap/"+namespace+"/"+release+"-ca"]
	if cm == nil || strings.TrimSpace(cm["data"].(object)["ca.crt"].(string)) != strings.TrimSpace(string(caPEM)) {
		t.Errorf("existingSecret: ConfigMap %v, want ca.crt = tls.caBundle decoded", cm)
	}

	objs = helmTemplate(t, "serviceMonitor.enabled=true", "serviceMonitor.tlsConfig.serverName=gw.example", "serviceMonitor.tlsConfig.ca.secret.name=corp-ca",
		"serviceMonitor.tlsConfig.ca.secret.key=ca.pem")
	if tc := field(t, objs["ServiceMonitor/"+namespace+"/"+release], "spec", "endpoints").([]any)[0].(object)["tlsConfig"]; !reflect.DeepEqual(tc,
		object{"serverName": "gw.example", "ca": object{"secret": object{"name": "corp-ca", "key": "ca.pem"}}}) {
		t.Errorf("serviceMonitor.tlsConfig: rendered %v, want it as given", tc)
	}
}

func verifyServing(t *testing.T, caPEM, crtPEM []byte, serverName string) {
	t.Helper()
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
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: serverName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("the serving certificate does not verify for %s with the ServiceMonitor's CA: %v", serverName, err)
	}
}

// matches says whether o's labels hold every label of sel.
func matches(sel object, o object) bool {
	labels, _ := o["metadata"].(object)["labels"].(object)
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// perClusterGroup is the group of files/alerts.yaml that uses the
// per-cluster series: rendered only with gateway.perClusterMetrics.maxClusters.
const perClusterGroup = "cluster-gateway.per-cluster"

// alertRules reads the chart's files/alerts.yaml: alert name -> rule, and
// the names of the alerts of perClusterGroup.
func alertRules(t *testing.T) ([]string, map[string]object, map[string]bool) {
	t.Helper()
	b, err := os.ReadFile(chartDir + "/files/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string   `json:"name"`
			Rules []object `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		t.Fatal(err)
	}
	var names []string
	rules, perCluster := map[string]object{}, map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			name := r["alert"].(string)
			if _, dup := rules[name]; dup {
				t.Fatalf("alert %s twice", name)
			}
			names, rules[name] = append(names, name), r
			if g.Name == perClusterGroup {
				perCluster[name] = true
			}
		}
	}
	return names, rules, perCluster
}

// renderedRules are the PrometheusRule's rules by alert name.
func renderedRules(t *testing.T, objs map[string]object) map[string]object {
	t.Helper()
	pr := objs["PrometheusRule/"+namespace+"/"+release]
	if pr == nil {
		t.Fatalf("no PrometheusRule in %v", keys(objs))
	}
	out := map[string]object{}
	for _, g := range field(t, pr, "spec", "groups").([]any) {
		if g.(object)["name"] == "" {
			t.Errorf("a group without a name: %v", g)
		}
		for _, r := range g.(object)["rules"].([]any) {
			out[r.(object)["alert"].(string)] = r.(object)
		}
	}
	return out
}

// The PrometheusRule holds files/alerts.yaml's rules as they are, less
// disabledAlerts, with ruleLabels on each (over the rules' own); the
// per-cluster alerts only with gateway.perClusterMetrics.maxClusters above 0,
// which also passes the flag that serves their series.
func TestChartPrometheusRule(t *testing.T) {
	names, all, perCluster := alertRules(t)
	for _, must := range []string{"ClusterGatewayCredentialExpiresSoon", "ClusterGatewayClusterUnreachable", "ClusterGatewayClusterCredentialExpiresSoon", "ClusterGatewayClusterDown"} {
		if _, ok := all[must]; !ok {
			t.Errorf("files/alerts.yaml has no %s", must)
		}
	}
	for _, down := range []string{"ClusterGatewayClusterUnreachable", "ClusterGatewayClusterDown"} {
		if all[down]["for"] != "5m" {
			t.Errorf("%s: for %v, want a cluster unreachable for 5 minutes", down, all[down]["for"])
		}
	}
	for _, exp := range []string{"ClusterGatewayCredentialExpiresSoon", "ClusterGatewayClusterCredentialExpiresSoon"} {
		if !strings.Contains(all[exp]["expr"].(string), "< 3600") {
			t.Errorf("%s: %v, want a credential expiring within the hour", exp, all[exp])
		}
	}
	for _, n := range []string{"ClusterGatewayClusterCredentialExpiresSoon", "ClusterGatewayClusterDown", "ClusterGatewayPerClusterSeriesCapped"} {
		if !perCluster[n] {
			t.Errorf("%s is not in the group %s", n, perClusterGroup)
		}
	}
	for _, n := range []string{"ClusterGatewayClusterCredentialExpiresSoon", "ClusterGatewayClusterDown"} {
		if !strings.Contains(all[n]["expr"].(string), "by (namespace, job, cluster_name)") {
			t.Errorf("%s: %v, want it per cluster_name", n, all[n]["expr"])
		}
	}
	want := map[string]object{}
	for n, r := range all {
		if !perCluster[n] {
			want[n] = r
		}
	}
	objs := helmTemplate(t, "prometheusRule.enabled=true", "prometheusRule.labels.release=kube-prometheus-stack")
	if l := field(t, objs["PrometheusRule/"+namespace+"/"+release], "metadata", "labels").(object); l["release"] != "kube-prometheus-stack" {
		t.Errorf("PrometheusRule labels %v lack prometheusRule.labels", l)
	}
	if got := renderedRules(t, objs); !reflect.DeepEqual(got, want) {
		t.Errorf("the PrometheusRule's rules differ from files/alerts.yaml less %s:\n%v\nwant\n%v", perClusterGroup, got, want)
	}
	for _, a := range args(t, objs) {
		if strings.HasPrefix(a, "--per-cluster-metrics-max-clusters") {
			t.Errorf("by default the gateway gets %s", a)
		}
	}
	objs = helmTemplate(t, "prometheusRule.enabled=true", "gateway.perClusterMetrics.maxClusters=300")
	if got := renderedRules(t, objs); !reflect.DeepEqual(got, all) {
		t.Errorf("with gateway.perClusterMetrics.maxClusters the PrometheusRule's rules differ from files/alerts.yaml:\n%v\nwant\n%v", got, all)
	}
	if !slices.Contains(args(t, objs), "--per-cluster-metrics-max-clusters=300") {
		t.Errorf("gateway.perClusterMetrics.maxClusters=300: args %v lack --per-cluster-metrics-max-clusters=300", args(t, objs))
	}

	want = all
	objs = helmTemplate(t, "prometheusRule.enabled=true", "prometheusRule.ruleLabels.team=platform", "prometheusRule.ruleLabels.severity=page",
		"gateway.perClusterMetrics.maxClusters=1", "prometheusRule.disabledAlerts={ClusterGatewayInventoryNoWriter,ClusterGatewayInventoryCollisions}")
	got := renderedRules(t, objs)
	var gotNames []string
	for n, r := range got {
		gotNames = append(gotNames, n)
		labels := r["labels"].(object)
		if labels["team"] != "platform" || labels["severity"] != "page" {
			t.Errorf("%s labels %v, want team=platform and severity=page from ruleLabels", n, labels)
		}
		w := want[n]
		r2 := object{}
		for k, v := range r {
			r2[k] = v
		}
		r2["labels"] = w["labels"]
		if !reflect.DeepEqual(r2, w) {
			t.Errorf("%s: %v, want the file's rule %v but for its labels", n, r, w)
		}
	}
	sort.Strings(gotNames)
	var wantNames []string
	for _, n := range names {
		if n != "ClusterGatewayInventoryNoWriter" && n != "ClusterGatewayInventoryCollisions" {
			wantNames = append(wantNames, n)
		}
	}
	sort.Strings(wantNames)
	if !reflect.DeepEqual(gotNames, wantNames) {
		t.Errorf("with disabledAlerts: alerts %v, want %v", gotNames, wantNames)
	}
}

// The NetworkPolicy selects the gateway's pods (not the proxy-servers') and
// admits to their serving port only the API servers' CIDRs and peers and
// Prometheus' pods in Prometheus' namespaces; egress is left alone unless
// rules are given.
func TestChartNetworkPolicy(t *testing.T) {
	objs := helmTemplate(t, "networkPolicy.enabled=true", "networkPolicy.apiServerCIDRs={10.0.0.0/24,192.168.1.10/32}",
		"networkPolicy.prometheus.namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=monitoring",
		"networkPolicy.prometheus.podSelector.matchLabels.app\\.kubernetes\\.io/name=prometheus",
		"konnectivityServer.enabled=true", "konnectivityServer.secretName=s", "gateway.konnectivity.enabled=true", "gateway.konnectivity.secretName=c")
	np := objs["NetworkPolicy/"+namespace+"/"+release]
	if np == nil {
		t.Fatalf("no NetworkPolicy in %v", keys(objs))
	}
	sel := field(t, np, "spec", "podSelector", "matchLabels").(object)
	podLabels := field(t, objs["Deployment/"+namespace+"/"+release], "spec", "template", "metadata", "labels").(object)
	for k, v := range sel {
		if podLabels[k] != v {
			t.Errorf("podSelector %v does not select the gateway's pods (%v)", sel, podLabels)
		}
	}
	stsLabels := field(t, objs["StatefulSet/"+namespace+"/"+release+"-konnectivity"], "spec", "template", "metadata", "labels").(object)
	if matches(sel, object{"metadata": object{"labels": stsLabels}}) {
		t.Errorf("podSelector %v selects the proxy-servers too (%v)", sel, stsLabels)
	}
	if pt := field(t, np, "spec", "policyTypes"); !reflect.DeepEqual(pt, []any{"Ingress"}) {
		t.Errorf("policyTypes %v, want Ingress only (egress open)", pt)
	}
	if _, ok := np["spec"].(object)["egress"]; ok {
		t.Errorf("egress rules rendered without networkPolicy.egress")
	}
	port := []any{object{"port": "https", "protocol": "TCP"}}
	want := []any{
		object{"from": []any{object{"ipBlock": object{"cidr": "10.0.0.0/24"}}, object{"ipBlock": object{"cidr": "192.168.1.10/32"}}}, "ports": port},
		object{"from": []any{object{
			"namespaceSelector": object{"matchLabels": object{"kubernetes.io/metadata.name": "monitoring"}},
			"podSelector":       object{"matchLabels": object{"app.kubernetes.io/name": "prometheus"}},
		}}, "ports": port},
	}
	if got := field(t, np, "spec", "ingress"); !reflect.DeepEqual(got, want) {
		g, _ := yaml.Marshal(got)
		w, _ := yaml.Marshal(want)
		t.Errorf("ingress:\n%s\nwant:\n%s", g, w)
	}
	// The named port is the gateway container's serving port.
	var ports []string
	for _, p := range container(t, objs)["ports"].([]any) {
		ports = append(ports, p.(object)["name"].(string))
	}
	if !reflect.DeepEqual(ports, []string{"https"}) {
		t.Errorf("the gateway container's ports %v, want the one named https the policy admits", ports)
	}

	// Without Prometheus selectors, only the API servers (never an empty peer, which admits everyone).
	objs = helmTemplate(t, "networkPolicy.enabled=true", "networkPolicy.apiServerCIDRs={10.0.0.0/24}",
		"networkPolicy.apiServerPeers[0].podSelector.matchLabels.k8s-app=konnectivity-agent",
		"networkPolicy.apiServerPeers[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=kube-system",
		"networkPolicy.egress[0].ports[0].port=53", "networkPolicy.egress[0].ports[0].protocol=UDP")
	np = objs["NetworkPolicy/"+namespace+"/"+release]
	ingress := field(t, np, "spec", "ingress").([]any)
	if len(ingress) != 1 || len(ingress[0].(object)["from"].([]any)) != 2 {
		t.Errorf("ingress %v, want one rule: the CIDR and the konnectivity-agent peer", ingress)
	}
	for _, r := range ingress {
		for _, p := range r.(object)["from"].([]any) {
			if len(p.(object)) == 0 {
				t.Errorf("an empty peer admits every pod: %v", ingress)
			}
		}
	}
	if pt := field(t, np, "spec", "policyTypes"); !reflect.DeepEqual(pt, []any{"Ingress", "Egress"}) {
		t.Errorf("with networkPolicy.egress: policyTypes %v, want Ingress and Egress", pt)
	}
	if eg := field(t, np, "spec", "egress"); !reflect.DeepEqual(eg, []any{object{"ports": []any{object{"port": float64(53), "protocol": "UDP"}}}}) {
		t.Errorf("egress %v, want networkPolicy.egress as given", eg)
	}

	if _, err := helmTemplateErr(t, "networkPolicy.enabled=true"); err == nil || !strings.Contains(err.Error(), "networkPolicy.enabled needs networkPolicy.apiServerCIDRs") {
		t.Errorf("a NetworkPolicy that shuts the API servers out: err %v, want it refused", err)
	}
}
