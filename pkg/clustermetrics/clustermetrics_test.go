package clustermetrics

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/component-base/metrics"

	"github.com/clustergateway/cluster-gateway/internal/testmetrics"
	"github.com/clustergateway/cluster-gateway/internal/testpki"
	"github.com/clustergateway/cluster-gateway/internal/testpoll"
	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/clusters"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
	"github.com/clustergateway/cluster-gateway/pkg/health"
	"github.com/clustergateway/cluster-gateway/pkg/pool"
)

// The store and the prober run informers and workers: every test stops them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const ns = "cluster-gateway-system"

// gatewaySecret is a Ready gateway whose client certificate expires at notAfter.
func gatewaySecret(t *testing.T, ca *testpki.CA, name string, notAfter time.Time) *corev1.Secret {
	t.Helper()
	p := ca.MustIssue(t, testpki.Spec{CommonName: "gateway", Client: true, NotAfter: notAfter})
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, ResourceVersion: "1", Labels: map[string]string{gateways.LabelGateway: "true"}},
		Data: map[string][]byte{
			gateways.KeyEndpoint: []byte("https://127.0.0.2:6443"), gateways.KeyCABundle: ca.CertPEM,
			gateways.KeyCredentialType: []byte("X509Certificate"), gateways.KeyCertificate: p.CertPEM, gateways.KeyPrivateKey: p.KeyPEM,
		},
	}
}

// start runs a store of client's gateways and a prober over it with probe,
// until the test ends, and registers cfg's collector in a registry of its own.
func start(t *testing.T, cfg Config, client *fake.Clientset, probe health.ProbeFunc) metrics.KubeRegistry {
	t.Helper()
	store := gateways.NewStore(client, ns)
	// As pkg/apiserver wires it: the prober over the clusters' records,
	// which hold the store's gateways and their probe states.
	pl, err := pool.New(*pool.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pl.Close)
	owner, err := clusters.New(clusters.Config{Store: store, Pool: pl})
	if err != nil {
		t.Fatal(err)
	}
	p, err := health.New(health.Config{Interval: 5 * time.Millisecond, Timeout: time.Second, FailureThreshold: 1, SuccessThreshold: 1, MaxBackoff: 20 * time.Millisecond, Workers: 2}, owner, probe)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { store.Run(ctx) })
	wg.Go(func() { p.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	reg := metrics.NewKubeRegistry()
	New(cfg, FromStore(store, p)).Register(reg)
	return reg
}

func gather(t *testing.T, reg metrics.KubeRegistry) testmetrics.Samples {
	t.Helper()
	s, err := testmetrics.Gather(reg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func series(name, cluster string) string { return fmt.Sprintf("%s{cluster_name=%q}", name, cluster) }

// Without a bound nothing is registered: no series names a cluster.
func TestOffRegistersNothing(t *testing.T) {
	if c := New(Config{}, nil); c != nil {
		t.Fatalf("New with MaxClusters 0: %v, want nil", c)
	}
	ca := testpki.MustCA(t, "managed")
	reg := start(t, Config{}, fake.NewClientset(gatewaySecret(t, ca, "a", time.Now().Add(time.Hour))), func(context.Context, string) health.Outcome {
		return health.Outcome{Reason: v1alpha1.ReasonReachable}
	})
	if s := gather(t, reg); len(s) != 0 {
		t.Errorf("registered with the bound 0: %v", s)
	}
	if err := (Config{MaxClusters: -1}).Validate(); err == nil || !strings.Contains(err.Error(), "--per-cluster-metrics-max-clusters") {
		t.Errorf("Validate of -1: %v, want an error naming the flag", err)
	}
}

// Series follow the prober (reachable 1, then 0, then 1; the last success
// stays while unreachable) and the credential (its notAfter, then the
// rotated one's), cover the first clusters by name only with the number
// left out told, and end with the gateway.
func TestSeriesFollowProberCredentialAndDeletion(t *testing.T) {
	ca := testpki.MustCA(t, "managed")
	t0 := time.Now().Truncate(time.Second)
	var down atomic.Bool
	secrets := []*corev1.Secret{
		gatewaySecret(t, ca, "c", t0.Add(3*time.Hour)), gatewaySecret(t, ca, "a", t0.Add(time.Hour)), gatewaySecret(t, ca, "b", t0.Add(2*time.Hour)),
	}
	client := fake.NewClientset(secrets[0], secrets[1], secrets[2])
	reg := start(t, Config{MaxClusters: 2}, client, func(_ context.Context, name string) health.Outcome {
		if name == "b" && down.Load() {
			return health.Outcome{Reason: v1alpha1.ReasonDialFailed, Message: "refused"}
		}
		return health.Outcome{Reason: v1alpha1.ReasonReachable}
	})
	want := func(what string, check func(testmetrics.Samples) error) {
		t.Helper()
		testpoll.Eventually(t, 30*time.Second, what, func() error { return check(gather(t, reg)) })
	}
	var upAt float64
	want("a and b reachable with their expiries, c left out", func(s testmetrics.Samples) error {
		for _, k := range []string{"reachable", "credential_expiry_timestamp_seconds", "last_successful_probe_timestamp_seconds"} {
			if n := s.Has(series("cluster_gateway_cluster_"+k, "c")); n {
				return fmt.Errorf("c, third by name, has %s with the bound 2", k)
			}
		}
		if s["cluster_gateway_cluster_series_omitted_clusters"] != 1 {
			return fmt.Errorf("omitted %v, want 1", s["cluster_gateway_cluster_series_omitted_clusters"])
		}
		for c, exp := range map[string]time.Time{"a": t0.Add(time.Hour), "b": t0.Add(2 * time.Hour)} {
			if v, ok := s[series("cluster_gateway_cluster_reachable", c)]; !ok || v != 1 {
				return fmt.Errorf("%s reachable %v (%v), want 1", c, v, ok)
			}
			if v := s[series("cluster_gateway_cluster_credential_expiry_timestamp_seconds", c)]; v != float64(exp.Unix()) {
				return fmt.Errorf("%s expiry %v, want %v", c, v, exp.Unix())
			}
			if v := s[series("cluster_gateway_cluster_last_successful_probe_timestamp_seconds", c)]; v < float64(t0.Unix()) {
				return fmt.Errorf("%s last success %v, want after %v", c, v, t0.Unix())
			}
		}
		upAt = s[series("cluster_gateway_cluster_last_successful_probe_timestamp_seconds", "b")]
		return nil
	})

	down.Store(true)
	var downAt float64
	want("b unreachable, its last success kept", func(s testmetrics.Samples) error {
		if v, ok := s[series("cluster_gateway_cluster_reachable", "b")]; !ok || v != 0 {
			return fmt.Errorf("b reachable %v (%v), want 0", v, ok)
		}
		downAt = s[series("cluster_gateway_cluster_last_successful_probe_timestamp_seconds", "b")]
		if downAt < upAt {
			return fmt.Errorf("b last success %v, before the %v seen while up", downAt, upAt)
		}
		return nil
	})
	time.Sleep(100 * time.Millisecond) // many probes, all failed
	if v := gather(t, reg)[series("cluster_gateway_cluster_last_successful_probe_timestamp_seconds", "b")]; v != downAt {
		t.Errorf("b's last success moved from %v to %v while every probe failed", downAt, v)
	}
	down.Store(false)
	want("b reachable again, a later success", func(s testmetrics.Samples) error {
		if v := s[series("cluster_gateway_cluster_reachable", "b")]; v != 1 {
			return fmt.Errorf("b reachable %v, want 1", v)
		}
		if v := s[series("cluster_gateway_cluster_last_successful_probe_timestamp_seconds", "b")]; v <= downAt {
			return fmt.Errorf("b last success %v, not after %v", v, downAt)
		}
		return nil
	})

	// A rotated certificate: the new notAfter.
	rotated := gatewaySecret(t, ca, "a", t0.Add(5*time.Hour))
	rotated.ResourceVersion = "2"
	if _, err := client.CoreV1().Secrets(ns).Update(context.Background(), rotated, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want("a's rotated expiry", func(s testmetrics.Samples) error {
		if v := s[series("cluster_gateway_cluster_credential_expiry_timestamp_seconds", "a")]; v != float64(t0.Add(5*time.Hour).Unix()) {
			return fmt.Errorf("a expiry %v, want %v", v, t0.Add(5*time.Hour).Unix())
		}
		return nil
	})

	// a deleted: its series end, c takes its place.
	if err := client.CoreV1().Secrets(ns).Delete(context.Background(), "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want("a's series gone, c covered", func(s testmetrics.Samples) error {
		for k := range s {
			if strings.Contains(k, `cluster_name="a"`) {
				return fmt.Errorf("stale series %s", k)
			}
		}
		if s[series("cluster_gateway_cluster_reachable", "c")] != 1 || s["cluster_gateway_cluster_series_omitted_clusters"] != 0 {
			return fmt.Errorf("c reachable %v, omitted %v; want 1 and 0", s[series("cluster_gateway_cluster_reachable", "c")], s["cluster_gateway_cluster_series_omitted_clusters"])
		}
		return nil
	})
}
