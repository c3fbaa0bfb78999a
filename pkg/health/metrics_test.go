package health_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics"

	"github.com/clustergateway/cluster-gateway/internal/testpoll"
	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
	"github.com/clustergateway/cluster-gateway/pkg/health"
)

// gauges reads the gauge name from reg by its reachable label, and fails on
// any other label.
func gauges(t *testing.T, reg metrics.KubeRegistry, name string) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != 1 || m.GetLabel()[0].GetName() != "reachable" {
				t.Fatalf("%s has labels %v, want only reachable", name, m.GetLabel())
			}
			out[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	return out
}

// cluster_gateway_health_addresses counts the addresses of gateways with
// several by their last probe, computed at scrape time: a gateway with one
// address is not counted, one whose probe found no addresses (not Ready)
// counts all of its as Unknown, and a gateway given one more address counts
// it too.
func TestAddressesMetric(t *testing.T) {
	p, client := startProber(t, health.FastConfig(), func(_ context.Context, name string) health.Outcome {
		switch name {
		case "ha":
			return health.Outcome{Reason: v1alpha1.ReasonReachable, Addresses: []health.AddressOutcome{
				{Address: "https://127.0.0.2:6443", Reason: v1alpha1.ReasonReachable},
				{Address: "https://127.0.0.3:6443", Reason: v1alpha1.ReasonDialFailed, Message: "refused"},
			}}
		case "unready":
			return health.Outcome{Reason: v1alpha1.ReasonGatewayNotReady, Message: "no"}
		}
		return health.Outcome{Reason: v1alpha1.ReasonReachable}
	})
	reg := metrics.NewKubeRegistry()
	p.Metrics().Register(reg)

	ha, unready := secret("ha"), secret("unready")
	ha.Data[gateways.KeyMoreEndpoints] = []byte("https://127.0.0.3:6443")
	unready.Data[gateways.KeyMoreEndpoints] = []byte("https://127.0.0.3:6443\nhttps://127.0.0.4:6443")
	for _, s := range []*corev1.Secret{ha, unready, secret("single")} {
		if _, err := client.CoreV1().Secrets(ns).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	want := func(name string, w map[string]float64) func() error {
		return func() error {
			if got := gauges(t, reg, name); fmt.Sprint(got) != fmt.Sprint(w) {
				return fmt.Errorf("%s: %v, want %v", name, got, w)
			}
			return nil
		}
	}
	testpoll.Eventually(t, 30*time.Second, "the clusters by status", want("cluster_gateway_health_clusters", map[string]float64{"True": 2, "False": 0, "Unknown": 1}))
	testpoll.Eventually(t, 30*time.Second, "the addresses by their last probe", want("cluster_gateway_health_addresses", map[string]float64{"True": 1, "False": 1, "Unknown": 3}))

	// One more address: counted from the changed gateway.
	unready = unready.DeepCopy()
	unready.ResourceVersion = "2"
	unready.Data[gateways.KeyMoreEndpoints] = []byte("https://127.0.0.3:6443\nhttps://127.0.0.4:6443\nhttps://127.0.0.5:6443")
	if _, err := client.CoreV1().Secrets(ns).Update(context.Background(), unready, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testpoll.Eventually(t, 30*time.Second, "the changed gateway's addresses", want("cluster_gateway_health_addresses", map[string]float64{"True": 1, "False": 1, "Unknown": 4}))

	// Deleted: no longer counted.
	if err := client.CoreV1().Secrets(ns).Delete(context.Background(), "ha", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testpoll.Eventually(t, 30*time.Second, "the deleted gateway's addresses gone", want("cluster_gateway_health_addresses", map[string]float64{"True": 0, "False": 0, "Unknown": 4}))
}
