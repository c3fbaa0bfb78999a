package chart

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-base/metrics/testutil"
	"sigs.k8s.io/yaml"

	dto "github.com/prometheus/client_model/go"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
	"github.com/clustergateway/cluster-gateway/internal/testpoll"
	"github.com/clustergateway/cluster-gateway/pkg/inventory"
)

// A series a rule selects: a metric name and the labels it matches on.
type selector struct {
	alert, metric string
	labels        []string
}

// targetLabels are the labels Prometheus adds to every series it scrapes
// through the chart's ServiceMonitor, not served by the gateway.
var targetLabels = map[string]bool{"namespace": true, "job": true, "instance": true, "pod": true, "service": true, "endpoint": true, "container": true}

// ruleSelectors parses each rule's expr with Prometheus' own PromQL parser
// and returns every vector selector in it.
func ruleSelectors(t *testing.T, rules map[string]object) []selector {
	t.Helper()
	var out []selector
	for alert, r := range rules {
		expr, err := parser.NewParser(parser.Options{}).ParseExpr(r["expr"].(string))
		if err != nil {
			t.Errorf("%s: expr %q is not valid PromQL: %v", alert, r["expr"], err)
			continue
		}
		n := 0
		parser.Inspect(expr, func(node parser.Node, path []parser.Node) error {
			vs, ok := node.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			s := selector{alert: alert, metric: vs.Name}
			// Labels an enclosing aggregation keeps (by) must be served too,
			// but for those Prometheus adds to every target.
			for _, p := range path {
				if ag, ok := p.(*parser.AggregateExpr); ok && !ag.Without {
					for _, l := range ag.Grouping {
						if !targetLabels[l] {
							s.labels = append(s.labels, l)
						}
					}
				}
			}
			for _, m := range vs.LabelMatchers {
				if m.Name == labels.MetricName {
					if m.Type != labels.MatchEqual {
						t.Errorf("%s: selects metrics by a pattern (%s); name each one, so this test can check it", alert, m)
					}
					s.metric = m.Value
					continue
				}
				s.labels = append(s.labels, m.Name)
			}
			out, n = append(out, s), n+1
			return nil
		})
		if n == 0 {
			t.Errorf("%s: expr %q selects no metric", alert, r["expr"])
		}
	}
	return out
}

// served maps each series name the text of /metrics offers a query to the
// label names it carries: a counter or gauge by its name; a histogram only
// as name_bucket (with le), name_sum and name_count, as Prometheus stores a
// classic histogram (a query of the bare name finds nothing); a summary as
// name (with quantile), name_sum and name_count.
func served(body io.Reader) (map[string]map[string]bool, error) {
	families, err := testutil.TextToMetricFamilies(body)
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]bool{}
	add := func(name string, f *dto.MetricFamily, extra ...string) {
		l := map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, p := range m.GetLabel() {
				l[p.GetName()] = true
			}
		}
		for _, e := range extra {
			l[e] = true
		}
		out[name] = l
	}
	for name, f := range families {
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			add(name+"_bucket", f, "le")
			add(name+"_sum", f)
			add(name+"_count", f)
		case dto.MetricType_SUMMARY:
			add(name, f, "quantile")
			add(name+"_sum", f)
			add(name+"_count", f)
		default:
			add(name, f)
		}
	}
	return out, nil
}

// missing lists the selectors whose metric, or a label they match on, the
// gateway does not serve.
func missing(sels []selector, have map[string]map[string]bool) []string {
	var out []string
	for _, s := range sels {
		l, ok := have[s.metric]
		if !ok {
			out = append(out, fmt.Sprintf("%s: %s is not served", s.alert, s.metric))
			continue
		}
		for _, name := range s.labels {
			if !l[name] {
				out = append(out, fmt.Sprintf("%s: %s has no label %s", s.alert, s.metric, name))
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

func TestServedParsesHistograms(t *testing.T) {
	text := `# TYPE a_seconds histogram
a_seconds_bucket{kind="x",le="1"} 1
a_seconds_bucket{kind="x",le="+Inf"} 1
a_seconds_sum{kind="x"} 0.5
a_seconds_count{kind="x"} 1
# TYPE b_total counter
b_total{reason="y"} 2
# TYPE c gauge
c 1
`
	have, err := served(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	sels := []selector{{"A", "a_seconds_bucket", []string{"kind", "le"}}, {"A", "a_seconds_count", []string{"kind"}},
		{"B", "b_total", []string{"reason"}}, {"C", "c", nil}}
	if m := missing(sels, have); len(m) > 0 {
		t.Errorf("missing %v in %v", m, have)
	}
	bad := []selector{{"A", "a_seconds", nil}, {"B", "b", nil}, {"B", "b_total", []string{"kind"}}, {"C", "c_count", nil}}
	if m := missing(bad, have); len(m) != 4 {
		t.Errorf("missing(%v) = %v, want all four: the bare histogram name, a name not served, a label not carried, a suffix of a gauge", bad, m)
	}
}

// Every metric the shipped alerts use is one a running gateway serves,
// with the labels they match on, read as the chart's ServiceMonitor would
// have Prometheus read it: a ServiceAccount token bound to the chart's
// metrics-reader ClusterRole, TLS verified for the ServiceMonitor's
// serverName. A renamed metric or label fails here. Metrics that appear
// only once something happened (vectors without a sample yet) are made to
// appear: a proxied request, a queued and refused watch, a credential
// Secret that is not a kubeconfig, an inventory write that fails; and the
// gateway runs with konnectivity and the inventory sync, whose metrics
// exist only then.
func TestAlertRulesUseServedMetrics(t *testing.T) {
	objs := helmTemplate(t, "prometheusRule.enabled=true", "serviceMonitor.enabled=true",
		"serviceMonitor.scraperSubjects[0].kind=ServiceAccount", "serviceMonitor.scraperSubjects[0].name=prometheus",
		"serviceMonitor.scraperSubjects[0].namespace=monitoring", "gateway.perClusterMetrics.maxClusters=10")
	rules := renderedRules(t, objs)
	sels := ruleSelectors(t, rules)
	// The per-cluster alerts are among those checked, and the gateway runs
	// with the flag the chart passes for them.
	_, _, perCluster := alertRules(t)
	for n := range perCluster {
		if _, ok := rules[n]; !ok {
			t.Errorf("%s not rendered with gateway.perClusterMetrics.maxClusters", n)
		}
	}
	var perClusterArgs []string
	for _, a := range args(t, objs) {
		if strings.HasPrefix(a, "--per-cluster-metrics-max-clusters=") {
			perClusterArgs = append(perClusterArgs, a)
		}
	}
	if len(perClusterArgs) != 1 {
		t.Errorf("the Deployment's per-cluster flag: %v, want one", perClusterArgs)
	}
	if t.Failed() {
		t.FailNow()
	}

	bin := os.Getenv("KUBE_BIN")
	if bin == "" {
		bin = filepath.Join("..", "..", "_output", "bin")
	}
	env, err := localenv.Start(context.Background(), localenv.Options{
		StateDir: t.TempDir(), BinDir: bin, ManagedClusters: 1, KonnectivityServers: 1, Logf: t.Logf,
		GatewayArgs: []string{
			perClusterArgs[0],
			"--inventory-sync=capi", "--inventory-sync-lease-duration=4s", "--inventory-sync-renew-deadline=2s", "--inventory-sync-retry-period=500ms",
			// One stream slot per cluster, so a second watch queues and is refused.
			"--max-streams-per-cluster=1", "--max-streams-per-user-per-cluster=1", "--queue-wait-timeout=1s",
		},
	})
	if err != nil {
		t.Fatalf("local environment: %v (run make tools build, or set KUBE_BIN)", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping the local environment: %v", err)
		}
	})
	ctx := context.Background()
	admin, err := kubernetes.NewForConfig(env.Hub.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}

	// Prometheus: a ServiceAccount bound by the chart's ClusterRoleBinding.
	scrape := prometheusScraper(t, env, admin, objs)

	// The inventory sync's Lease Role, as config/inventory-sync ships it.
	kustomized, err := run(t, "kubectl", "kustomize", configDir+"/inventory-sync")
	if err != nil {
		t.Fatal(err)
	}
	applyManifests(t, env, kustomized)
	secrets := admin.CoreV1().Secrets(localenv.GatewayNamespace)
	capi := func(cluster string) *corev1.Secret {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: cluster + "-kubeconfig", Labels: map[string]string{"cluster.x-k8s.io/cluster-name": cluster}},
			Type:       "cluster.x-k8s.io/secret",
			Data:       map[string][]byte{"value": []byte("not a kubeconfig")},
		}
	}
	// A Secret that is not a gateway holds the name the sync would write
	// "blocked" to: the write fails (WriteFailed). "malformed" becomes a
	// gateway whose credential Secret is no kubeconfig (SourceMalformed).
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: inventory.GatewayName(localenv.GatewayNamespace, "blocked")}},
		capi("blocked"), capi("malformed"),
	} {
		if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// A proxied request, and a watch that holds the cluster's one stream
	// slot while another user's watch waits in the queue and is refused.
	m := env.Managed[0]
	adminClient := hubClient(t, env, env.Hub.Admin)
	if code := get(t, adminClient, m.ProxyURL(env.Hub)+"/api/v1/namespaces"); code != http.StatusOK {
		t.Fatalf("proxied GET: %d", code)
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	req, _ := http.NewRequestWithContext(watchCtx, http.MethodGet, m.ProxyURL(env.Hub)+"/api/v1/namespaces?watch=1", nil)
	resp, err := adminClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("proxied watch: %v %v", resp, err)
	}
	defer resp.Body.Close()
	if _, err := env.Kubectl(env.Hub.Kubeconfig, "create", "clusterrolebinding", "bob:cluster-gateway:proxy", "--clusterrole=cluster-gateway:proxy", "--user=bob"); err != nil {
		t.Fatal(err)
	}
	if err := testpoll.Until(30*time.Second, "bob's watch queued behind the admin's and refused", func() error {
		if code := get(t, hubClient(t, env, env.Bob.Cert), m.ProxyURL(env.Hub)+"/api/v1/namespaces?watch=1"); code != http.StatusTooManyRequests {
			return fmt.Errorf("bob's watch: %d, want 429", code)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	var last []string
	if err := testpoll.UntilEvery(2*time.Minute, time.Second, "every metric of the alerts served", func() error {
		have, err := scrape()
		if err != nil {
			return err
		}
		if last = missing(sels, have); len(last) > 0 {
			return fmt.Errorf("%d missing", len(last))
		}
		return nil
	}); err != nil {
		t.Errorf("%v:\n%s", err, strings.Join(last, "\n"))
		for _, log := range env.GatewayLogs() {
			if b, err := os.ReadFile(log); err == nil {
				t.Logf("the end of %s:\n%s", log, b[max(0, len(b)-4096):])
			}
		}
	}
}

// prometheusScraper applies the chart's metrics-reader ClusterRole and
// binding to the hub, for the ServiceAccount prometheus in monitoring, and
// returns a scrape of the gateway's /metrics with its token, verifying the
// gateway's certificate for the ServiceMonitor's serverName. Before the
// binding, the same token is refused.
func prometheusScraper(t *testing.T, env *localenv.Env, admin kubernetes.Interface, objs map[string]object) func() (map[string]map[string]bool, error) {
	t.Helper()
	ctx := context.Background()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "monitoring"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ServiceAccounts("monitoring").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "prometheus"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token, err := env.Kubectl(env.Hub.Kubeconfig, "create", "token", "prometheus", "-n", "monitoring")
	if err != nil {
		t.Fatal(err)
	}
	ep := field(t, objs["ServiceMonitor/"+namespace+"/"+release], "spec", "endpoints").([]any)[0].(object)
	serverName := field(t, ep, "tlsConfig", "serverName").(string)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(env.Gateway.CA.CertPEM)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: serverName}}}
	t.Cleanup(client.CloseIdleConnections)
	url := env.Gateway.URL + ep["path"].(string)
	do := func() (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(token))
		return client.Do(req)
	}
	resp, err := do()
	if err != nil {
		t.Fatalf("GET %s as Prometheus, verifying %s: %v", url, serverName, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("GET %s as Prometheus before the binding: %d, want 403", url, resp.StatusCode)
	}

	var rbac []string
	for _, k := range []string{"ClusterRole//" + metricsReader, "ClusterRoleBinding//" + metricsReader} {
		b, err := yaml.Marshal(objs[k])
		if err != nil {
			t.Fatal(err)
		}
		rbac = append(rbac, string(b))
	}
	applyManifests(t, env, strings.Join(rbac, "\n---\n"))

	scrape := func() (map[string]map[string]bool, error) {
		resp, err := do()
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			return nil, fmt.Errorf("GET %s as Prometheus: %s: %s", url, resp.Status, b)
		}
		return served(resp.Body)
	}
	// The refusal above may be cached for the authorizer's unauthorized TTL (10s).
	if err := testpoll.Until(time.Minute, "Prometheus may read /metrics once bound", func() error {
		_, err := scrape()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return scrape
}

func applyManifests(t *testing.T, env *localenv.Env, manifests string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "manifests.yaml")
	if err := os.WriteFile(path, []byte(manifests), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := env.Kubectl(env.Hub.Kubeconfig, "apply", "-f", path); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
}

func hubClient(t *testing.T, env *localenv.Env, user *localenv.KeyPair) *http.Client {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(env.Hub.CA.CertPEM)
	pair, err := tls.X509KeyPair(user.CertPEM, user.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}}}}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func get(t *testing.T, c *http.Client, url string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// A label an aggregation keeps (by) is required of the metrics under it,
// but not a target label nor one a without drops: a per-cluster series
// served with its label renamed fails the check.
func TestRuleSelectorsKeepGroupingLabels(t *testing.T) {
	sels := ruleSelectors(t, map[string]object{
		"A": {"expr": `min by (namespace, job, cluster_name) (a_seconds{kind="x"}) - time() < 3600`},
		"B": {"expr": `sum without (server) (b) == 0 and on (instance) min by (instance) (c) == 1`},
	})
	sort.Slice(sels, func(i, j int) bool { return sels[i].metric < sels[j].metric })
	want := []selector{{"A", "a_seconds", []string{"cluster_name", "kind"}}, {"B", "b", nil}, {"B", "c", nil}}
	if fmt.Sprint(sels) != fmt.Sprint(want) {
		t.Errorf("selectors %v, want %v", sels, want)
	}
	have, err := served(strings.NewReader("# TYPE a_seconds gauge\na_seconds{kind=\"x\",cluster=\"one\"} 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if m := missing(sels[:1], have); fmt.Sprint(m) != "[A: a_seconds has no label cluster_name]" {
		t.Errorf("missing %v, want cluster_name reported", m)
	}
}
