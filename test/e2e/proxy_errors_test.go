package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestProxyErrors checks that each way a proxied request can fail ends at
// once with a Kubernetes Status whose code and message say what to fix.
func TestProxyErrors(t *testing.T) {
	requireGateway(t)
	t.Parallel()
	m1, m2 := env.Managed[0], env.Managed[1]

	// An address where nothing listens: connection refused.
	l, err := net.Listen("tcp", testIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := l.Addr().String()
	l.Close()
	refused := directGateway(uniqueName(t, "refused"), 0)
	refused.Spec.Endpoint.Address = "https://" + closedAddr
	createGateway(t, refused)

	// A listener that accepts and then says nothing: the TLS handshake can
	// only end by the gateway's dial timeout.
	silent, err := net.Listen("tcp", testIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	mute := directGateway(uniqueName(t, "mute"), 0)
	mute.Spec.Endpoint.Address = "https://" + silent.Addr().String()
	createGateway(t, mute)

	// managed-1's address, verified with managed-2's CA: not trusted.
	untrusted := directGateway(uniqueName(t, "untrusted"), 0)
	untrusted.Spec.Endpoint.CABundle = m2.CA.CertPEM
	createGateway(t, untrusted)

	// managed-1 verified against a name its certificate does not carry.
	wrongName := directGateway(uniqueName(t, "wrongname"), 0)
	wrongName.Spec.Endpoint.ServerName = "not-the-apiserver.example"
	createGateway(t, wrongName)

	// A Secret written by hand whose certificate does not parse.
	broken := uniqueName(t, "broken")
	hub, err := kubernetes.NewForConfig(env.Hub.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = hub.CoreV1().Secrets("cluster-gateway-system").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: broken, Labels: map[string]string{"gateway.clustergateway.io/cluster-gateway": "true"}},
		Data: map[string][]byte{
			"endpoint":        []byte(m1.URL),
			"ca.crt":          m1.CA.CertPEM,
			"credential-type": []byte("X509Certificate"),
			"tls.crt":         []byte("not a certificate"),
			"tls.key":         m1.GatewayUser.KeyPEM,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.CoreV1().Secrets("cluster-gateway-system").Delete(ctx, broken, metav1.DeleteOptions{}) })

	cases := []struct {
		name    string
		gateway string
		code    int
		reason  string
		message []string
	}{
		{"unknown gateway", "no-such-cluster", 404, "NotFound", []string{`"no-such-cluster" not found`}},
		{"unusable stored credential", broken, 503, "ServiceUnavailable", []string{"cannot be used", "spec.credential.x509"}},
		{"connection refused", refused.Name, 503, "ServiceUnavailable", []string{"is unreachable", "connection refused"}},
		{"no TLS answer within the dial timeout", mute.Name, 503, "ServiceUnavailable", []string{"is unreachable"}},
		{"certificate signed by another CA", untrusted.Name, 502, "", []string{"does not trust", "spec.endpoint.caBundle", "unknown authority"}},
		{"certificate for another name", wrongName.Name, 502, "", []string{"does not trust", "not-the-apiserver.example"}},
	}
	// An upgrade (what kubectl exec sends) to the silent cluster: its setup is
	// bounded by the dial timeout too, though the request is long-running.
	t.Run("upgrade with no TLS answer", func(t *testing.T) {
		t.Parallel()
		code, body := hubUpgrade(t, "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/"+mute.Name+
			"/proxy/api/v1/namespaces/default/pods/demo/exec?command=true&stdout=true")
		if code != 503 || !strings.Contains(body, "dial timeout") {
			t.Fatalf("upgrade to a silent cluster: %d %s, want 503 naming the dial timeout", code, body)
		}
		t.Logf("%d %s", code, body)
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			code, body := hubGet(t, "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/"+c.gateway+"/proxy/api/v1/namespaces")
			var status metav1.Status
			if err := json.Unmarshal([]byte(body), &status); err != nil || status.Kind != "Status" {
				t.Fatalf("answer is not a Status (%v): %d %s", err, code, body)
			}
			if code != c.code || int(status.Code) != c.code {
				t.Fatalf("code = %d (Status %d), want %d: %s", code, status.Code, c.code, status.Message)
			}
			if c.reason != "" && string(status.Reason) != c.reason {
				t.Errorf("reason = %q, want %q", status.Reason, c.reason)
			}
			for _, m := range c.message {
				if !strings.Contains(status.Message, m) {
					t.Errorf("message %q does not mention %q", status.Message, m)
				}
			}
			t.Logf("%d %s", code, status.Message)
		})
	}
}

// hubUpgrade sends an HTTP/1.1 upgrade request (SPDY, as kubectl's fallback
// does) through the hub as the hub admin and returns the status and body.
func hubUpgrade(t *testing.T, path string) (int, string) {
	t.Helper()
	cfg := env.Hub.RESTConfig()
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg.NextProtos = []string{"http/1.1"}
	client := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	defer client.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodPost, env.Hub.URL+path, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "SPDY/3.1")
	req.Header.Set("X-Stream-Protocol-Version", "v4.channel.k8s.io")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("upgrade request: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
