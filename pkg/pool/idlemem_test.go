package pool

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
)

// idleUpstreamEnv makes the test binary a cluster's API server for
// TestIdlePooledTargetMemory (see TestMain): in its own process, so that the
// server's side of each connection is not counted as the pool's.
const idleUpstreamEnv = "POOL_TEST_IDLE_UPSTREAM"

// serveIdleUpstream serves HTTP/2 over TLS with the certificate in dir
// until stdin closes, printing its address first. Its answers carry the
// headers a kube-apiserver sends (a unique Audit-Id each).
func serveIdleUpstream(dir string) error {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		return err
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		return err
	}
	var n int
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++ // one handler at a time is enough for an id
		h := w.Header()
		h.Set("Audit-Id", fmt.Sprintf("%08x-1b2c-4d5e-8f90-%012x", n, n))
		h.Set("Cache-Control", "no-cache, private")
		h.Set("Content-Type", "application/json")
		h.Set("X-Kubernetes-Pf-Flowschema-Uid", "6a1c4b0e-2f3d-4e5f-8a9b-0c1d2e3f4a5b")
		h.Set("X-Kubernetes-Pf-Prioritylevel-Uid", "7b2d5c1f-3e4a-5f6b-9c0d-1e2f3a4b5c6d")
		_, _ = w.Write([]byte(`{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"default","uid":"0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0","resourceVersion":"42","creationTimestamp":"2026-12-01T00:00:00Z"},"spec":{"finalizers":["kubernetes"]},"status":{"phase":"Active"}}`))
	})}
	go func() { _, _ = bufio.NewReader(os.Stdin).ReadString(0); _ = ln.Close() }()
	fmt.Println(ln.Addr().String())
	if err := srv.Serve(ln); err != nil && !strings.Contains(err.Error(), "closed") {
		return err
	}
	return nil
}

// startIdleUpstream runs serveIdleUpstream in a child process, stopped when
// the test ends, and returns its URL and the CA that signed its certificate.
func startIdleUpstream(t *testing.T) (*url.URL, *testpki.CA) {
	t.Helper()
	ca := testpki.MustCA(t, "server-ca")
	serving := ca.MustIssue(t, testpki.Spec{CommonName: "upstream", IPs: []string{"127.0.0.1"}, Server: true})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), serving.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), serving.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), idleUpstreamEnv+"="+dir)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("the upstream process: %v", err)
		}
	})
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("the upstream process printed no address: %v", err)
	}
	if _, _, err := net.SplitHostPort(strings.TrimSpace(addr)); err != nil {
		t.Fatalf("the upstream process printed %q: %v", addr, err)
	}
	return &url.URL{Scheme: "https", Host: strings.TrimSpace(addr)}, ca
}

// heapAndStacks is the live heap and the goroutine stacks in use, after
// two collections (the second frees what the first's finalizers let go).
func heapAndStacks() (heap, stacks uint64) {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, ms.StackInuse
}

// maxIdleTargetHeap bounds the live heap the pool keeps per idle pooled
// cluster. Measured here (Go 1.26, x/net v0.57, EC P-256 keys): 31.5 KiB, of
// which x/net's connection holds 8 KiB of bufio buffers (a 4 KiB reader and
// writer, for the connection's life), its ClientConn, framer and HPACK
// tables about 3.5 KiB, its transport and pool maps 2 KiB; crypto/tls
// 3 KiB of record and handshake buffers, 1.75 KiB of AES-GCM state and the
// parsed server certificate; the entry's parsed CA bundle (the connection's
// RootCAs) and client key pair, its private copy of the Target's PEM (1.4
// KiB, Acquire's fast path), its transports and trackers. What a scan's
// 1,000 idle entries cost at every moment (issue 38: 286 MiB RSS with
// 10,000 clusters) follows this.
const maxIdleTargetHeap = 34 << 10

// What the pool keeps for each cluster it holds while nobody uses it is
// bounded per idle target, after one request each as a scan leaves them,
// against a cluster in another process (its side of each connection is
// not the pool's): the live heap, and one goroutine (x/net's read loop).
func TestIdlePooledTargetMemory(t *testing.T) {
	const n = 200
	if os.Getenv("POOL_TEST_HEAP_PROFILE") != "" {
		runtime.MemProfileRate = 1
	}
	u, ca := startIdleUpstream(t)
	clientCA := testpki.MustCA(t, "client-ca")
	client := clientCA.MustIssue(t, testpki.Spec{CommonName: "c", Client: true})
	p := newTestPool(t, Config{Capacity: 2 * n})
	targets := make([]*Target, n)
	for i := range targets {
		// Each its own copy, as each ClusterGateway brings its own.
		targets[i] = &Target{Cluster: fmt.Sprintf("idle-%d", i), Address: u,
			CAData: append([]byte(nil), ca.CertPEM...), CertData: append([]byte(nil), client.CertPEM...), KeyData: append([]byte(nil), client.KeyPEM...)}
	}
	heap0, stacks0 := heapAndStacks()
	g0 := runtime.NumGoroutine()
	for _, tg := range targets {
		l := acquire(t, p, tg)
		mustGet(t, l.Transport(), u, "/api/v1/namespaces/default")
		l.Release()
	}
	time.Sleep(100 * time.Millisecond) // the read loops settle into their wait
	heap1, stacks1 := heapAndStacks()
	g1 := runtime.NumGoroutine()
	if st := p.Stats(); st.Live != n || st.OpenConns != n {
		t.Fatalf("%d entries and %d connections pooled, want %d each", st.Live, st.OpenConns, n)
	}
	if path := os.Getenv("POOL_TEST_HEAP_PROFILE"); path != "" {
		f, err := os.Create(path)
		if err == nil {
			err = pprof.Lookup("heap").WriteTo(f, 0)
			f.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	perHeap := float64(int64(heap1)-int64(heap0)) / n
	perStack := float64(int64(stacks1)-int64(stacks0)) / n
	t.Logf("per idle pooled target: %.1f KiB heap, %.1f KiB goroutine stacks, %.2f goroutines", perHeap/1024, perStack/1024, float64(g1-g0)/n)
	if perHeap > maxIdleTargetHeap {
		t.Errorf("%.1f KiB of live heap per idle pooled target, want at most %.1f KiB (set POOL_TEST_HEAP_PROFILE=<file> for a heap profile of them)", perHeap/1024, float64(maxIdleTargetHeap)/1024)
	}
	if g1-g0 > n {
		t.Errorf("%d goroutines for %d idle pooled targets, want at most one each (x/net's read loop)", g1-g0, n)
	}
	runtime.KeepAlive(targets)
}
