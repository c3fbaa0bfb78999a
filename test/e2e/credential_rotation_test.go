package e2e

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
	"github.com/clustergateway/cluster-gateway/internal/testpoll"
	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// By default each kind of rotation five times under the streams; `make
// soak` runs TestSecretSourceRotation for 30 minutes.
var sourceRotation = flag.Duration("source-rotation.duration", 15*time.Second,
	"TestSecretSourceRotation: how long the kubeconfig Secret is rotated, every second: a third the token, a third the client certificate, a third the CA")

// streamsGrace is the gateway's retire grace (the pool's default, which the
// e2e gateway keeps): a stream on a retired entry may run that long.
const streamsGrace = 5 * time.Minute

// TestSecretSourceRotation rotates a Cluster API-format kubeconfig Secret
// every second (the token, then the client certificate, then the CA) while
// a watch, `logs -f` and port-forward run through the hub and ordinary
// requests go on. No ordinary request fails; a token rotation retires no
// pooled entry, a certificate or CA rotation does; no stream is cut before
// the retire grace; and once everything is closed, the gateway's
// goroutines, fds, pool entries and heap are back at their baseline.
func TestSecretSourceRotation(t *testing.T) {
	requireGateway(t)
	hub := hubAdmin(t)
	m := env.Managed[0]
	tokens := ensureTokenIdentity(t, m)
	base := gatewayMetrics(t)

	name := uniqueName(t, "rotating")
	secret := name + "-kubeconfig"
	put := func(ca []byte, token string, cert *gatewayv1alpha1.X509Credential) {
		putSourceSecret(t, hub, capiSecret(secret, capiKubeconfig(t, m, ca, token, cert)))
	}
	put(m.CA.CertPEM, newToken(t, tokens), nil)
	gc := gatewayClient(t, env.Hub.Kubeconfig)
	createGateway(t, secretRefGateway(name, secret, "", nil))
	awaitReady(t, name, gatewayv1alpha1.ReasonValid)

	via := filepath.Join(t.TempDir(), "via-hub.kubeconfig")
	if err := localenv.WriteKubeconfig(via, name, env.Hub.URL+"/apis/gateway.clustergateway.io/v1alpha1/clustergateways/"+name+"/proxy",
		env.Hub.CA.CertPEM, &clientcmdapi.AuthInfo{ClientCertificateData: env.Hub.Admin.CertPEM, ClientKeyData: env.Hub.Admin.KeyPEM}); err != nil {
		t.Fatal(err)
	}
	_, cs := viaHub(t, name)
	direct := managedClient(t, 0)
	ns := name
	if _, err := direct.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = direct.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })

	// The streams, opened on the first pooled entry.
	w := openWatch(t, cs, direct, ns, "before")
	defer w.Stop()
	logs := startKubectl(t, via, nil, "logs", "-f", "demo")
	logs.waitLine(t, logLine)
	pf := startKubectl(t, via, nil, "port-forward", "--address=127.0.0.1", "pod/demo", ":80")
	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+pf.waitLine(t, forwarding)[1], 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	echo := func(what string) {
		t.Helper()
		payload := bytes.Repeat([]byte(what), 4<<10)
		_ = conn.SetDeadline(time.Now().Add(kubectlTimeout))
		go func() { _, _ = conn.Write(payload) }()
		got := make([]byte, len(payload))
		if _, err := io.ReadFull(conn, got); err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("port-forward %s: %v (echo equal: %v)\nkubectl stderr:\n%s", what, err, bytes.Equal(got, payload), pf.stderr)
		}
	}
	echo("opened ")

	// Ordinary requests all along.
	var requests, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	requestsDone := make(chan struct{})
	go func() {
		defer close(requestsDone)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			requests.Add(1)
			if _, err := cs.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{}); err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			}
		}
	}()

	retired := func() float64 {
		return gatewayMetrics(t)[`cluster_gateway_pool_entry_retirements_total{reason="rotated"}`]
	}
	third := *sourceRotation / 3
	start := time.Now()
	rotations := map[string]int{}
	var retiredAt []float64
	cert := newClientCert(t, m.CA)
	for phase, kind := range []string{"token", "certificate", "CA"} {
		retiredAt = append(retiredAt, retired())
		for time.Since(start) < time.Duration(phase+1)*third {
			time.Sleep(time.Second)
			switch kind {
			case "token":
				put(m.CA.CertPEM, newToken(t, tokens), nil)
			case "certificate":
				cert = newClientCert(t, m.CA)
				put(m.CA.CertPEM, "", cert)
			case "CA":
				put(append(append([]byte{}, m.CA.CertPEM...), newTestCreds(t, "rotation-extra").CAPEM...), "", cert)
			}
			rotations[kind]++
		}
		t.Logf("%s phase: %d rotations, %d requests so far (%d failed)", kind, rotations[kind], requests.Load(), failed.Load())
	}
	retiredAt = append(retiredAt, retired())
	close(stop)
	<-requestsDone

	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d ordinary requests failed during the rotations; the first: %v", n, requests.Load(), firstErr.Load())
	}
	if got := retiredAt[1] - retiredAt[0]; got != 0 {
		t.Errorf("%d token rotations retired %v pooled entries; a token is not part of the transport", rotations["token"], got)
	}
	if got := retiredAt[2] - retiredAt[1]; got < 1 {
		t.Errorf("%d certificate rotations retired no pooled entry", rotations["certificate"])
	}
	if got := retiredAt[3] - retiredAt[2]; got < 1 {
		t.Errorf("%d CA rotations retired no pooled entry", rotations["CA"])
	}

	// The streams are on the first entry, retired at the first certificate
	// rotation: they may run for the retire grace after it, and were not cut.
	if time.Since(start) < streamsGrace-30*time.Second {
		if _, err := direct.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := waitAdded(w, "after"); err != nil {
			t.Errorf("the watch opened before the rotations: %v", err)
		}
		for drained := false; !drained; {
			select {
			case _, ok := <-logs.lines:
				if !ok {
					t.Fatalf("logs -f ended during the rotations; stderr:\n%s", logs.stderr)
				}
			default:
				drained = true
			}
		}
		logs.waitLineWithin(t, logLine, 10*time.Second) // the fake kubelet writes one a second
		echo("rotated ")
	} else {
		t.Logf("the rotations outlasted the retire grace (%s): streams on the first entry may have been cut, as they should", streamsGrace)
	}

	// Everything closed: back at the baseline.
	w.Stop()
	conn.Close()
	pf.stop()
	logs.stop()
	if err := gc.GatewayV1alpha1().ClusterGateways().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	awaitGatewayBaseline(t, base)
	testpoll.Eventually(t, 3*time.Minute, "the gateway's pool entries and heap back at their baseline", func() error {
		now := gatewayMetrics(t)
		for _, metric := range []string{"cluster_gateway_pool_entries", "cluster_gateway_pool_retiring_entries", "cluster_gateway_pool_open_connections"} {
			if now[metric] > base[metric] {
				return fmt.Errorf("%s %v, baseline %v", metric, now[metric], base[metric])
			}
		}
		// Heap in use is read as the gateway's runtime last saw it; a
		// leaked entry per rotation (hundreds) would be far past this.
		if h, b := now["go_memstats_heap_inuse_bytes"], base["go_memstats_heap_inuse_bytes"]; h > b+32<<20 {
			return fmt.Errorf("heap in use %.1f MiB, baseline %.1f MiB", h/(1<<20), b/(1<<20))
		}
		return nil
	})
	t.Logf("%v rotations in %s, %d ordinary requests", rotations, time.Since(start).Round(time.Second), requests.Load())
}
