package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestAPIPaging: limit and continue page through the gateways in name
// order, and kubectl's chunked list (--chunk-size) sees every one.
func TestAPIPaging(t *testing.T) {
	requireGateway(t)
	t.Parallel()
	c := gatewayClient(t, env.Hub.Kubeconfig)
	all, err := c.GatewayV1alpha1().ClusterGateways().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, gw := range all.Items {
		want = append(want, gw.Name)
	}
	slices.Sort(want)
	if len(want) < 2 {
		t.Fatalf("need at least two gateways to page, have %v", want)
	}

	var got []string
	opts := metav1.ListOptions{Limit: 1}
	for pages := 0; ; pages++ {
		l, err := c.GatewayV1alpha1().ClusterGateways().List(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) > 1 {
			t.Fatalf("limit 1 returned %d items", len(l.Items))
		}
		for _, gw := range l.Items {
			got = append(got, gw.Name)
		}
		if l.Continue == "" {
			break
		}
		if l.RemainingItemCount == nil || *l.RemainingItemCount < 1 {
			t.Fatalf("page %d has a continue token but remainingItemCount %v", pages, l.RemainingItemCount)
		}
		opts.Continue = l.Continue
	}
	// Other tests create and delete gateways meanwhile: every gateway that
	// existed throughout must be seen, in order, once.
	if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
		t.Fatalf("pages are not in name order without repeats: %v", got)
	}
	for _, name := range []string{"cluster-1", "cluster-2"} {
		if !slices.Contains(got, name) {
			t.Fatalf("paged list %v misses %s", got, name)
		}
	}
	out := mustKubectl(t, env.Hub.Kubeconfig, "get", "cgw", "--chunk-size=1", "-o", "name")
	for _, name := range []string{"cluster-1", "cluster-2"} {
		if !strings.Contains(out, "clustergateway.gateway.clustergateway.io/"+name) {
			t.Fatalf("kubectl get --chunk-size=1 misses %s:\n%s", name, out)
		}
	}
}
