package gateways

import (
	"runtime"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxHeapPerStoredGateway bounds the live heap one parsed gateway keeps,
// Secret decoded as the informer decodes it (protobuf) and then dropped.
// Measured: 3,488 bytes (go1.26, amd64; 3,503 with -race), of which about
// 1,450 are the Secret's three PEM values (EC key) the gateway keeps; 3,680
// when Gateway held its Conn twice. The bound leaves room for small changes,
// not for that second copy.
const maxHeapPerStoredGateway = 3600

// What a stored gateway holds on the heap, for 10,000 gateways shaped like
// hack/bench's (Direct, a CA bundle, an X509 client certificate and key, one
// label): the figure behind make bench's "per stored ClusterGateway".
func TestHeapPerStoredGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("parses 10,000 Secrets")
	}
	const n = 10000
	c := validCredential(t)
	wire, err := (&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-0000", Namespace: testNamespace, ResourceVersion: "12345", UID: "0b6a2c1e-3f1d-4c55-9a8e-2f1d6c0e7a11",
			Labels: map[string]string{LabelGateway: "true", "bench": "true"}},
		Data: map[string][]byte{
			KeyEndpointType:   []byte("Direct"),
			KeyEndpoint:       []byte("https://127.0.0.1:6443"),
			KeyCABundle:       c.caPEM,
			KeyCredentialType: []byte("X509Certificate"),
			KeyCertificate:    c.certPEM,
			KeyPrivateKey:     c.keyPEM,
			KeyLabels:         []byte(`{"bench":"true"}`),
		},
	}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	parse := func(i int) *Gateway {
		var s corev1.Secret
		if err := s.Unmarshal(wire); err != nil {
			t.Fatal(err)
		}
		s.Name = "bench-" + strconv.Itoa(i)
		return Parse(&s)
	}
	parse(0) // whatever is allocated once (regexps, caches) is not per gateway
	gws := make([]*Gateway, n)
	before := liveHeap()
	for i := range gws {
		gws[i] = parse(i)
	}
	per := (liveHeap() - before) / n
	if !gws[n-1].Ready {
		t.Fatalf("the gateway is not ready: %s", gws[n-1].Problem)
	}
	t.Logf("live heap per stored gateway: %d bytes", per)
	if per > maxHeapPerStoredGateway {
		t.Errorf("a stored gateway keeps %d bytes of live heap, more than %d", per, maxHeapPerStoredGateway)
	}
	runtime.KeepAlive(gws)
}

// liveHeap is the heap's live bytes after a full GC.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
