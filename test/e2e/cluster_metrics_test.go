package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clustergateway/cluster-gateway/internal/testmetrics"
	"github.com/clustergateway/cluster-gateway/internal/testpki"
	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// clusterSeries is the sample of a per-cluster series as /metrics has it.
func clusterSeries(metric, cluster string) string {
	return fmt.Sprintf("cluster_gateway_cluster_%s{cluster_name=%q}", metric, cluster)
}

// TestPerClusterMetrics: the suite's gateway, started without
// --per-cluster-metrics-max-clusters, serves no series that names a
// cluster. A replica with the flag (bound 2) serves, for the first two
// gateways by name, reachable, credential expiry and last successful probe
// that follow a managed kube-apiserver stopped and started again and a
// rotated client certificate; the third gateway has none, and is counted as
// omitted until the first is deleted, whose series then end. It stops a
// kube-apiserver of its own (a second one of managed-1 on 127.0.0.144): no
// other test's cluster.
func TestPerClusterMetrics(t *testing.T) {
	requireGateway(t)
	ctx := context.Background()
	for k := range gatewayMetrics(t) {
		if strings.Contains(k, "cluster_name=") || strings.HasPrefix(k, "cluster_gateway_cluster_") {
			t.Errorf("the gateway without --per-cluster-metrics-max-clusters serves %s", k)
		}
	}

	m := env.Managed[0]
	srv, err := env.StartAPIServerReplica(ctx, m, "127.0.0.144")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.StopCluster(srv) })
	replica, err := env.StartReplica(ctx, "cluster-gateway-per-cluster", append(haArgs(),
		"--per-cluster-metrics-max-clusters=2", "--probe-interval=1s", "--probe-max-backoff=2s", "--probe-failure-threshold=1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.StopReplica(replica, 10*time.Second) })

	// Names that sort before every other gateway of the suite ("0" < "c", "e").
	prefix := uniqueName(t, "0-pcm")
	a, b, c := prefix+"-a", prefix+"-b", prefix+"-c"
	cert := func(notAfter time.Time) *gatewayv1alpha1.X509Credential {
		p := m.CA.MustIssue(t, testpki.Spec{CommonName: "gateway", Organization: []string{"system:masters"}, Client: true, NotAfter: notAfter})
		return &gatewayv1alpha1.X509Credential{Certificate: p.CertPEM, PrivateKey: p.KeyPEM}
	}
	t0 := time.Now().Truncate(time.Second)
	expiry := map[string]time.Time{a: t0.Add(2 * time.Hour), b: t0.Add(3 * time.Hour), c: t0.Add(4 * time.Hour)}
	for _, name := range []string{c, a, b} {
		gw := directGateway(name, 0)
		gw.Spec.Credential.X509 = cert(expiry[name])
		if name == a {
			gw.Spec.Endpoint.Address = srv.URL // the kube-apiserver this test stops
		}
		createGateway(t, gw)
	}

	scrape := func() testmetrics.Samples { return replicaMetrics(t, replica) }
	eventually(t, "a and b reachable with their certificates' notAfter, c omitted", func() error {
		s := scrape()
		for _, name := range []string{a, b} {
			if v, ok := s[clusterSeries("reachable", name)]; !ok || v != 1 {
				return fmt.Errorf("%s reachable %v (served: %v), want 1", name, v, ok)
			}
			if v := s[clusterSeries("credential_expiry_timestamp_seconds", name)]; v != float64(expiry[name].Unix()) {
				return fmt.Errorf("%s credential expiry %v, want %v", name, v, expiry[name].Unix())
			}
			if v := s[clusterSeries("last_successful_probe_timestamp_seconds", name)]; v < float64(t0.Unix()) {
				return fmt.Errorf("%s last successful probe %v, want after %v", name, v, t0.Unix())
			}
		}
		for k := range s {
			if strings.Contains(k, fmt.Sprintf("cluster_name=%q", c)) {
				return fmt.Errorf("%s served: %s is third by name with the bound 2", k, c)
			}
		}
		if v := s["cluster_gateway_cluster_series_omitted_clusters"]; v < 1 {
			return fmt.Errorf("omitted clusters %v, want at least 1 (%s and the suite's)", v, c)
		}
		return nil
	})
	// The expiry is the one the API shows.
	gw, err := gatewayClient(t, env.Hub.Kubeconfig).GatewayV1alpha1().ClusterGateways().Get(ctx, b, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cr := gw.Status.Credential; cr == nil || cr.ExpirationTime == nil || !cr.ExpirationTime.Time.Equal(expiry[b]) {
		t.Errorf("%s status.credential %+v, want expirationTime %v", b, cr, expiry[b])
	}

	// a's kube-apiserver stops: a is unreachable, its last success stays.
	if err := env.StopCluster(srv); err != nil {
		t.Fatal(err)
	}
	var lastUp float64
	eventually(t, "a unreachable", func() error {
		s := scrape()
		if v, ok := s[clusterSeries("reachable", a)]; !ok || v != 0 {
			return fmt.Errorf("%s reachable %v (served: %v), want 0", a, v, ok)
		}
		lastUp = s[clusterSeries("last_successful_probe_timestamp_seconds", a)]
		return nil
	})
	time.Sleep(5 * time.Second) // probes at least every --probe-max-backoff (2s), all failing
	s := scrape()
	if v := s[clusterSeries("last_successful_probe_timestamp_seconds", a)]; v != lastUp || v < float64(t0.Unix()) {
		t.Errorf("%s last successful probe %v while down, want it to stay at %v", a, v, lastUp)
	}
	if v := s[clusterSeries("reachable", b)]; v != 1 {
		t.Errorf("%s reachable %v while a is down, want 1", b, v)
	}

	// Back: reachable again, a later success.
	if err := env.StartCluster(ctx, srv); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a reachable again", func() error {
		s := scrape()
		if v := s[clusterSeries("reachable", a)]; v != 1 {
			return fmt.Errorf("%s reachable %v, want 1", a, v)
		}
		if v := s[clusterSeries("last_successful_probe_timestamp_seconds", a)]; v <= lastUp {
			return fmt.Errorf("%s last successful probe %v, not after %v", a, v, lastUp)
		}
		return nil
	})

	// b's certificate rotated: the new notAfter.
	rotated := t0.Add(5 * time.Hour)
	gc := gatewayClient(t, env.Hub.Kubeconfig).GatewayV1alpha1().ClusterGateways()
	cur, err := gc.Get(ctx, b, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Credential.X509 = cert(rotated)
	if _, err := gc.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b's rotated certificate's notAfter", func() error {
		if v := scrape()[clusterSeries("credential_expiry_timestamp_seconds", b)]; v != float64(rotated.Unix()) {
			return fmt.Errorf("%s credential expiry %v, want %v", b, v, rotated.Unix())
		}
		return nil
	})

	// a deleted: none of its series remain, and c, now second, has its own.
	if err := gc.Delete(ctx, a, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a's series gone, c covered", func() error {
		s := scrape()
		for k := range s {
			if strings.Contains(k, fmt.Sprintf("cluster_name=%q", a)) {
				return fmt.Errorf("stale series of the deleted %s: %s", a, k)
			}
		}
		if v := s[clusterSeries("reachable", c)]; v != 1 {
			return fmt.Errorf("%s reachable %v, want 1", c, v)
		}
		return nil
	})
}
