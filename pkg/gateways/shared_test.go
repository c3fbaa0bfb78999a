package gateways

import (
	"reflect"
	"runtime"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clustergateway/cluster-gateway/internal/testgateways"
)

func sharedSecret(name, labels string, ca []byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace},
		Data: map[string][]byte{KeyEndpoint: []byte("https://127.0.0.1:6443"), KeyCABundle: append([]byte(nil), ca...), KeyLabels: []byte(labels)}}
}

// Gateways with equal labels and CA bundle hold one copy of each; others
// their own; and what no gateway holds any more leaves the table.
func TestSharedLabelsAndCA(t *testing.T) {
	c, c2 := testgateways.ValidCredential(t), testgateways.ValidCredential(t)
	a := Parse(sharedSecret("a", `{"env":"prod","region":"eu"}`, c.CAPEM))
	b := Parse(sharedSecret("b", `{"region":"eu","env":"prod"}`, c.CAPEM))
	d := Parse(sharedSecret("d", `{"env":"dev"}`, c2.CAPEM))
	if reflect.ValueOf(a.Object.Labels).UnsafePointer() != reflect.ValueOf(b.Object.Labels).UnsafePointer() {
		t.Error("two gateways with equal labels hold two maps")
	}
	if &a.Object.Spec.Endpoint.CABundle[0] != &b.Object.Spec.Endpoint.CABundle[0] {
		t.Error("two gateways with the same CA bundle hold two copies")
	}
	if d.Object.Labels["env"] != "dev" || a.Object.Labels["env"] != "prod" || string(d.Object.Spec.Endpoint.CABundle) != string(c2.CAPEM) {
		t.Errorf("labels or CA bundle mixed up: %v %v", a.Object.Labels, d.Object.Labels)
	}
	// Public is the client's copy: changing it changes no stored gateway.
	pub := a.Public()
	pub.Labels["env"] = "changed"
	pub.Spec.Endpoint.CABundle[0] = 'x'
	if b.Object.Labels["env"] != "prod" || string(b.Object.Spec.Endpoint.CABundle) != string(c.CAPEM) {
		t.Error("a change to a gateway's public copy changed another gateway")
	}

	gws := make([]*Gateway, 1000)
	hashes := make([]uint64, len(gws))
	for i := range gws {
		gws[i] = Parse(sharedSecret("g"+strconv.Itoa(i), `{"n":"`+strconv.Itoa(i)+`"}`, c.CAPEM))
		hashes[i] = hashMeta(testNamespace, gws[i].Object.Labels, nil)
		if n := sharedEntries(hashes[i]); n == 0 {
			t.Fatalf("gateway %d's labels are not in the shared table", i)
		}
	}
	runtime.KeepAlive(gws)
	clear(gws)
	// Cleanups run in a goroutine of the runtime after a GC: wait for them,
	// however long that takes (the test's own timeout ends a leak).
	for _, h := range hashes {
		for sharedEntries(h) > 0 {
			runtime.GC()
			time.Sleep(10 * time.Millisecond)
		}
	}
	runtime.KeepAlive([]*Gateway{a, b, d})
}

// sharedEntries is the number of entries of hash h in the shared table.
func sharedEntries(h uint64) int {
	sharedValues.Lock()
	defer sharedValues.Unlock()
	return len(sharedValues.byHash[h])
}
