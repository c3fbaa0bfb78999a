package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/clustergateway/cluster-gateway/internal/testmetrics"
)

// A watch that its client drops must free its stream on the managed cluster
// at once, not when the cluster's watch timeout ends it: the managed
// kube-apiserver's apiserver_longrunning_requests gauge counts the watches
// it serves, and it must come back to where it was once the client stopped
// them. The watches ask for a timeout far beyond the poll, so only the
// gateway ending them upstream brings the count back in time. PodTemplates:
// a resource that no other test watches, so parallel tests do not move
// the count.
func TestDroppedWatchesFreeTheirUpstreamStreams(t *testing.T) {
	requireGateway(t)
	t.Parallel()
	const n = 5
	m := env.Managed[0]
	direct := managedClient(t, 0)
	ctx := context.Background()
	ns := uniqueName(t, "watch-release")
	if _, err := direct.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = direct.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) })

	viaHubCfg, _ := viaHub(t, m.GatewayName)
	gatewayPort := env.Hub.RESTConfig()
	gatewayPort.Host = env.Gateway.URL + "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/" + m.GatewayName + "/proxy"
	gatewayPort.CAData = env.Gateway.CA.CertPEM
	for _, path := range []struct {
		name string
		cfg  *rest.Config
	}{{"through the hub", viaHubCfg}, {"on the gateway's port", gatewayPort}} {
		t.Run(path.name, func(t *testing.T) {
			c, err := kubernetes.NewForConfig(path.cfg)
			if err != nil {
				t.Fatal(err)
			}
			base := upstreamWatches(t)
			var ws []watch.Interface
			for range n {
				timeout := int64(600)
				w, err := c.CoreV1().PodTemplates(ns).Watch(ctx, metav1.ListOptions{TimeoutSeconds: &timeout})
				if err != nil {
					t.Fatal(err)
				}
				ws = append(ws, w)
			}
			stopped := false
			defer func() {
				if !stopped {
					for _, w := range ws {
						w.Stop()
					}
				}
			}()
			eventually(t, fmt.Sprintf("the managed cluster serving the %d new watches (%.0f before)", n, base), func() error {
				if got := upstreamWatches(t); got < base+n {
					return fmt.Errorf("it serves %.0f PodTemplate watches", got)
				}
				return nil
			})
			for _, w := range ws {
				w.Stop()
			}
			stopped = true
			eventually(t, fmt.Sprintf("the managed cluster ending the %d dropped watches (back to %.0f)", n, base), func() error {
				if got := upstreamWatches(t); got > base {
					return fmt.Errorf("it still serves %.0f PodTemplate watches: the gateway kept the upstream watch of a client that left", got)
				}
				return nil
			})
		})
	}
}

// upstreamWatches is how many PodTemplate watches managed-1's kube-apiserver
// serves, from its /metrics read with its admin credentials.
func upstreamWatches(t *testing.T) float64 {
	t.Helper()
	c, err := env.Managed[0].HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	s, err := testmetrics.Scrape(c, env.Managed[0].URL+"/metrics")
	if err != nil {
		t.Fatalf("managed-1 /metrics: %v", err)
	}
	var sum float64
	for k, v := range s {
		if strings.HasPrefix(k, "apiserver_longrunning_requests{") && strings.Contains(k, `resource="podtemplates"`) && strings.Contains(k, `verb="WATCH"`) {
			sum += v
		}
	}
	return sum
}
