package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
	"github.com/clustergateway/cluster-gateway/internal/testmetrics"
	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// managedClient is the admin client of managed cluster i, direct.
func managedClient(t *testing.T, i int) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(env.Managed[i].RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// viaHub is a client of managed cluster i through the hub and the gateway
// named gateway, as the hub admin.
func viaHub(t *testing.T, gateway string) (*rest.Config, kubernetes.Interface) {
	t.Helper()
	cfg := env.Hub.RESTConfig()
	cfg.Host = env.Hub.URL + "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/" + gateway + "/proxy"
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, c
}

// createGateway creates gw through the hub and deletes it when the test ends.
func createGateway(t *testing.T, gw *gatewayv1alpha1.ClusterGateway) {
	t.Helper()
	c := gatewayClient(t, env.Hub.Kubeconfig)
	if _, err := c.GatewayV1alpha1().ClusterGateways().Create(context.Background(), gw, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ClusterGateway %s: %v", gw.Name, err)
	}
	t.Cleanup(func() {
		err := c.GatewayV1alpha1().ClusterGateways().Delete(context.Background(), gw.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete ClusterGateway %s: %v", gw.Name, err)
		}
	})
}

// directGateway describes managed cluster i like localenv's own gateways.
func directGateway(name string, i int) *gatewayv1alpha1.ClusterGateway {
	m := env.Managed[i]
	return &gatewayv1alpha1.ClusterGateway{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: gatewayv1alpha1.ClusterGatewaySpec{
			Endpoint: gatewayv1alpha1.Endpoint{Address: m.URL, CABundle: m.CA.CertPEM},
			Credential: gatewayv1alpha1.Credential{
				Type: gatewayv1alpha1.CredentialX509Certificate,
				X509: &gatewayv1alpha1.X509Credential{Certificate: m.GatewayUser.CertPEM, PrivateKey: m.GatewayUser.KeyPEM},
			},
		},
	}
}

// hubGet sends a GET through the hub as the hub admin and returns the
// status code and body.
func hubGet(t *testing.T, path string) (int, string) {
	t.Helper()
	code, body, err := hubDo(path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return code, body
}

var (
	hubClientOnce sync.Once
	hubClient     *http.Client
	hubClientErr  error
)

// hubDo is hubGet for any goroutine: one shared client, so connections are reused.
func hubDo(path string) (int, string, error) {
	code, _, body, err := hubDoHeader(path)
	return code, body, err
}

// hubDoHeader is hubDo with the answer's headers. It sends the request
// once, as it is: unlike client-go, it does not send it again after a 503
// or 429 with Retry-After, so a test sees what the gateway answered.
func hubDoHeader(path string) (int, http.Header, string, error) {
	hubClientOnce.Do(func() { hubClient, hubClientErr = rest.HTTPClientFor(env.Hub.RESTConfig()) })
	if hubClientErr != nil {
		return 0, nil, "", hubClientErr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, env.Hub.URL+path, nil)
	req.Header.Set("Accept", "application/json")
	resp, err := hubClient.Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(body), err
}

// gatewayMetrics reads the gateway's own /metrics (as the hub admin, whom the
// gateway authenticates with the hub's client CA and authorizes through the hub).
func gatewayMetrics(t *testing.T) testmetrics.Samples {
	t.Helper()
	return replicaMetrics(t, env.Gateway)
}

// replicaMetrics reads one gateway replica's /metrics as the hub admin.
func replicaMetrics(t *testing.T, g *localenv.Gateway) testmetrics.Samples {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(g.CA.CertPEM)
	admin := env.Hub.Admin
	pair, err := tls.X509KeyPair(admin.CertPEM, admin.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}},
	}}
	defer client.CloseIdleConnections()
	m, err := testmetrics.Scrape(client, g.URL+"/metrics")
	if err != nil {
		t.Fatalf("gateway %s /metrics: %v", g.URL, err)
	}
	return m
}

// awaitGatewayBaseline waits until the gateway's goroutines and open file
// descriptors, read from its /metrics, are back near base (a few come and
// go with the hub's connections and informers; a leak per request or
// entry is well past that).
func awaitGatewayBaseline(t *testing.T, base map[string]float64) {
	t.Helper()
	eventually(t, "the gateway's goroutines and open fds return near their baseline", func() error {
		m := gatewayMetrics(t)
		if g, f := m["go_goroutines"], m["process_open_fds"]; g > base["go_goroutines"]+15 || f > base["process_open_fds"]+5 {
			return fmt.Errorf("goroutines %v (baseline %v), open fds %v (baseline %v)", g, base["go_goroutines"], f, base["process_open_fds"])
		}
		return nil
	})
}

// ensureSlowPod creates, on managed cluster i, a running pod whose container
// "slow" the fake kubelet never answers for a non-follow logs request.
func ensureSlowPod(t *testing.T, i int) string {
	t.Helper()
	ctx := context.Background()
	c := managedClient(t, i)
	const name = "slowpod"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:   "fake-node",
			Containers: []corev1.Container{{Name: "slow", Image: "fake"}},
		},
	}
	if _, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod, err := c.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: "slow", Image: "fake", ImageID: "fake", Ready: true,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
	}}
	if _, err := c.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}
