package gateways

import (
	"runtime"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clustergateway/cluster-gateway/internal/testgateways"
	"github.com/clustergateway/cluster-gateway/internal/testpki"
)

// maxHeapPerStoredGateway bounds the live heap one parsed gateway keeps,
// Secret decoded as the informer decodes it (protobuf) and then dropped,
// when the gateways share their CA and labels, as hack/bench's do. Measured:
// 2,480 bytes (go1.26, amd64), of which about 850 are the client
// certificate and key (PEM, EC key); 3,496 when each gateway kept its own CA
// bundle, label map and namespace, and a sync.Map. The bound leaves room
// for small changes, not for one of those copies again.
const maxHeapPerStoredGateway = 2600

// maxHeapPerDistinctGateway is the bound when no two gateways share their CA
// or labels. Measured: 3,716 bytes (go1.26, amd64); 3,495 before the CA and
// labels were shared: sharing costs about 220 bytes per gateway where
// nothing is alike.
const maxHeapPerDistinctGateway = 3800

// What a stored gateway holds on the heap, for 10,000 gateways shaped like
// hack/bench's (Direct, a CA bundle, an X509 client certificate and key, one
// label; two clusters' CAs, the same label): the figure behind make bench's
// "per stored ClusterGateway".
func TestHeapPerStoredGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("parses 10,000 Secrets")
	}
	c, c2 := testgateways.ValidCredential(t), testgateways.ValidCredential(t)
	wires := [][]byte{benchWire(t, c.CAPEM, c.CertPEM, c.KeyPEM, "true"), benchWire(t, c2.CAPEM, c2.CertPEM, c2.KeyPEM, "true")}
	per := heapPerGateway(t, 10000, func(i int) []byte { return wires[i%2] })
	t.Logf("live heap per stored gateway: %d bytes", per)
	if per > maxHeapPerStoredGateway {
		t.Errorf("a stored gateway keeps %d bytes of live heap, more than %d", per, maxHeapPerStoredGateway)
	}
}

// The same, when each gateway has a CA and a label value of its own: what
// shares their CA and labels must not cost much more than it saves.
func TestHeapPerDistinctGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("issues 2,000 CAs")
	}
	const n = 2000
	c := testgateways.ValidCredential(t)
	wires := make([][]byte, n)
	for i := range wires {
		ca := testpki.MustCA(t, "ca-"+strconv.Itoa(i))
		wires[i] = benchWire(t, ca.CertPEM, c.CertPEM, c.KeyPEM, strconv.Itoa(i))
	}
	per := heapPerGateway(t, n, func(i int) []byte { return wires[i] })
	t.Logf("live heap per stored gateway, none alike: %d bytes", per)
	if per > maxHeapPerDistinctGateway {
		t.Errorf("a stored gateway keeps %d bytes of live heap, more than %d", per, maxHeapPerDistinctGateway)
	}
}

// benchWire is a gateway's Secret as the hub sends it (protobuf).
func benchWire(t *testing.T, ca, cert, key []byte, label string) []byte {
	t.Helper()
	wire, err := (&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-0000", Namespace: testNamespace, ResourceVersion: "12345", UID: "0b6a2c1e-3f1d-4c55-9a8e-2f1d6c0e7a11",
			Labels: map[string]string{LabelGateway: "true", "bench": "true"}},
		Data: map[string][]byte{
			KeyEndpointType:   []byte("Direct"),
			KeyEndpoint:       []byte("https://127.0.0.1:6443"),
			KeyCABundle:       ca,
			KeyCredentialType: []byte("X509Certificate"),
			KeyCertificate:    cert,
			KeyPrivateKey:     key,
			KeyLabels:         []byte(`{"bench":"` + label + `"}`),
		},
	}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return wire
}

// heapPerGateway parses n gateways from wire(i) and returns the live heap
// each keeps.
func heapPerGateway(t *testing.T, n int, wire func(int) []byte) int64 {
	parse := func(i int) *Gateway {
		var s corev1.Secret
		if err := s.Unmarshal(wire(i)); err != nil {
			t.Fatal(err)
		}
		s.Name = "bench-" + strconv.Itoa(i)
		return Parse(&s)
	}
	parse(0) // whatever is allocated once (regexps, caches) is not per gateway
	gws := make([]*Gateway, n)
	for i := range gws {
		gws[i] = parse(i)
	}
	for _, g := range gws {
		if !g.Ready {
			t.Fatalf("the gateway is not ready: %s", g.Problem)
		}
	}
	// What the gateways hold is what dropping them frees (not what the heap
	// grew by while parsing: what was freed meanwhile, such as the test's
	// CAs, would be counted against it).
	with := liveHeap()
	runtime.KeepAlive(gws)
	clear(gws)
	return (with - liveHeap()) / int64(n)
}

// liveHeap is the heap's live bytes once full GCs free nothing more.
// Objects with cleanups (the CAs' keys) are freed a cycle after their
// cleanup has run in its own goroutine: each GC is followed by a pause
// for it, which only settles the heap, it asserts nothing on time.
func liveHeap() int64 {
	var m runtime.MemStats
	last, same := int64(-1), 0
	for range 50 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
		runtime.ReadMemStats(&m)
		if int64(m.HeapAlloc) == last {
			if same++; same == 2 {
				break
			}
		} else {
			same = 0
		}
		last = int64(m.HeapAlloc)
	}
	return last
}
