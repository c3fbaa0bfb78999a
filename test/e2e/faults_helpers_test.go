package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/clustergateway/cluster-gateway/pkg/generated/clientset/versioned"
)

// Helpers of the fault tests (faults_*_test.go).

// gatewayDirectConfig is a client config for the gateway's own port (not
// through the hub), as the hub admin: the gateway authenticates its client
// certificate with the hub's client CA, and its delegated authorizer allows
// system:masters without asking the hub.
func gatewayDirectConfig() *rest.Config {
	return &rest.Config{
		Host: env.Gateway.URL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: env.Gateway.CA.CertPEM, CertData: env.Hub.Admin.CertPEM, KeyData: env.Hub.Admin.KeyPEM,
		},
		QPS: 50, Burst: 100,
	}
}

// gatewayDirect is the ClusterGateway clientset on the gateway's own port.
func gatewayDirect(t *testing.T) versioned.Interface {
	t.Helper()
	c, err := versioned.NewForConfig(gatewayDirectConfig())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// proxyDirect is a client of a managed cluster through the gateway's own
// port (not through the hub), as the hub admin.
func proxyDirect(t *testing.T, gateway string) kubernetes.Interface {
	t.Helper()
	cfg := gatewayDirectConfig()
	cfg.Host += "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/" + gateway + "/proxy"
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// procStatusKB reads a "kB" field (VmRSS, VmHWM) of /proc/<pid>/status.
func procStatusKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("/proc/%d/status %s: %v", pid, field, err)
			}
			return n
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, field)
	return 0
}

// openFDsOf is how many file descriptors process pid has open, from the kernel.
func openFDsOf(t *testing.T, pid int) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}
