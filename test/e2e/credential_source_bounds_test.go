package e2e

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// aliasBombRSSBound is how much the gateway's peak RSS may grow while it
// reads an alias-bomb kubeconfig: its parse allocates a few MiB (pkg/boundedyaml:
// at most 160 bytes per byte); following the aliases would take hundreds of
// MiB per reader, and every component reads it.
const aliasBombRSSBound = 64 << 20

// A writer of Secrets in a credential source namespace replaces a working
// Cluster API kubeconfig with one that also holds 2000 YAML aliases to a
// 100 KiB string (about 110 KiB; 200 MiB of JSON if they were followed).
// Only the gateway that names it becomes SourceMalformed, saying what to
// fix; its neighbour keeps serving; and the real gateway process's peak RSS
// (VmHWM, reset first through /proc/<pid>/clear_refs) grows by less than
// aliasBombRSSBound while every component reads the new version. Not
// parallel: it resets the peak RSS.
func TestSecretSourceAliasBombBounded(t *testing.T) {
	requireGateway(t)
	hub := hubAdmin(t)
	m := env.Managed[0]
	good := capiKubeconfig(t, m, m.CA.CertPEM, "", &gatewayv1alpha1.X509Credential{Certificate: m.GatewayUser.CertPEM, PrivateKey: m.GatewayUser.KeyPEM})
	name, neighbour := uniqueName(t, "bomb"), uniqueName(t, "neighbour")
	putSourceSecret(t, hub, capiSecret(name+"-kubeconfig", good))
	putSourceSecret(t, hub, capiSecret(neighbour+"-kubeconfig", good))
	createGateway(t, secretRefGateway(name, name+"-kubeconfig", "", nil))
	createGateway(t, secretRefGateway(neighbour, neighbour+"-kubeconfig", "", nil))
	awaitReady(t, name, gatewayv1alpha1.ReasonValid)
	awaitReady(t, neighbour, gatewayv1alpha1.ReasonValid)
	if code, body := hubGet(t, proxyPath(name, "/api/v1/namespaces/default")); code != http.StatusOK {
		t.Fatalf("through the gateway before the bomb: %d %s", code, body)
	}

	var b strings.Builder
	b.Write(good)
	fmt.Fprintf(&b, "extensions:\n- name: a\n  extension: &a \"%s\"\n- name: b\n  extension: [", strings.Repeat("x", 100<<10))
	for i := range 2000 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("*a")
	}
	b.WriteString("]\n")

	pid := env.Gateway.Process.Pid()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatalf("reset the gateway's peak RSS: %v", err)
	}
	rss0 := procStatusKB(t, pid, "VmRSS")
	putSourceSecret(t, hub, capiSecret(name+"-kubeconfig", []byte(b.String())))
	gw := awaitReady(t, name, gatewayv1alpha1.ReasonSourceMalformed)
	if c := readyCondition(gw); c == nil || !strings.Contains(c.Message, "uses a YAML anchor or alias") || strings.Contains(c.Message, "xxx") {
		t.Errorf("Ready condition %+v; want SourceMalformed naming the aliases, without the content", c)
	}
	// The proxy and the prober have read the new version too: the proxy
	// refuses the gateway with the source's problem.
	eventually(t, "the proxy to refuse the malformed source", func() error {
		if code, body := hubGet(t, proxyPath(name, "/api/v1/namespaces/default")); code != http.StatusServiceUnavailable || !strings.Contains(body, "anchor or alias") {
			return fmt.Errorf("%d %.300s", code, body)
		}
		return nil
	})
	if code, body := hubGet(t, proxyPath(neighbour, "/api/v1/namespaces/default")); code != http.StatusOK {
		t.Errorf("the neighbour on its own Secret: %d %s", code, body)
	}
	peak := procStatusKB(t, pid, "VmHWM")
	growth := (peak - rss0) << 10
	t.Logf("gateway RSS %d MiB before, peak %d MiB: grew %.1f MiB (bound %d MiB)", rss0>>10, peak>>10, float64(growth)/(1<<20), aliasBombRSSBound>>20)
	if growth >= aliasBombRSSBound {
		t.Errorf("the gateway's peak RSS grew by %d MiB reading a %d KiB kubeconfig; bound %d MiB", growth>>20, b.Len()>>10, aliasBombRSSBound>>20)
	}
}
