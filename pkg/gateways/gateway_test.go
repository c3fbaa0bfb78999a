package gateways

import (
	"runtime"
	"strings"
	"testing"
	"time"
	"weak"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clustergateway/cluster-gateway/internal/testgateways"
	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// A parsed gateway keeps nothing of its Secret but the data it uses: with
// 10,000 gateways cached, the Secrets' metadata and data maps were a quarter
// of the cache's memory. Writes read the Secret from the hub (GetCurrent).
func TestParsedGatewayDoesNotKeepItsSecret(t *testing.T) {
	sec := mustToSecret(t, testgateways.X509Gateway(testgateways.ValidCredential(t)), nil)
	sec.ResourceVersion = "7"
	ref := weak.Make(sec)
	g := Parse(sec)
	sec = nil
	for range 3 { // a weak pointer is cleared once its object is collected
		runtime.GC()
	}
	if ref.Value() != nil {
		t.Error("the Secret is still reachable from its parsed gateway")
	}
	if !g.Ready || g.Object.Spec.Credential.X509 == nil || len(g.Object.Spec.Credential.X509.PrivateKey) == 0 {
		t.Fatalf("the parsed gateway lost its credential: ready %v, %v", g.Ready, g.Problem)
	}
	// The informer keys its cache by the Secret's namespace and name, and
	// compares resourceVersions on a relist.
	m := g.GetObjectMeta()
	if m.GetNamespace() != testNamespace || m.GetName() != "c1" || m.GetResourceVersion() != "7" {
		t.Errorf("GetObjectMeta = %s/%s at %s, want %s/c1 at 7", m.GetNamespace(), m.GetName(), m.GetResourceVersion(), testNamespace)
	}
	runtime.KeepAlive(g)
}

// A gateway whose Secret is unusable stays unusable, for the same reason,
// when the clock crosses its certificate's notAfter: the status of each
// phase is computed from what the Secret showed, not from the Secret.
func TestLaterPhaseKeepsTheSecretsProblems(t *testing.T) {
	t0 := time.Now().Truncate(time.Second)
	sec := mustToSecret(t, testgateways.X509Gateway(testgateways.ClientCredential(t, t0.Add(-time.Hour), t0.Add(time.Hour))), nil)
	sec.Data[KeyInsecure] = []byte("maybe")
	g := parseAt(sec, t0)
	later := g.at(t0.Add(2 * time.Hour))
	if later == g {
		t.Fatal("crossing notAfter did not compute a new status")
	}
	for _, x := range []*Gateway{g, later} {
		cond := ready(t, x.Object)
		if x.Ready || cond.Reason != v1alpha1.ReasonInvalidSecret || !strings.Contains(cond.Message, KeyInsecure) {
			t.Errorf("ready %v, %s: %q; want Ready=False %s naming data[%s]", x.Ready, cond.Reason, cond.Message, v1alpha1.ReasonInvalidSecret, KeyInsecure)
		}
	}
	if g.Object.Status.Conditions[0].Message != ready(t, g.Object).Message || &g.Object.Status.Conditions[0] == &later.Object.Status.Conditions[0] {
		t.Error("the later phase changed the earlier one's status")
	}
}

// A Secret stored before hosts in other IPv4 forms were refused (127.1 is
// 127.0.0.1 to a forward proxy or a cgo resolver, a name to netip) is a
// gateway that cannot be used, saying what to write; a well-formed one
// read with it is unaffected.
func TestStoredOtherIPv4FormIsNotReady(t *testing.T) {
	address := mustToSecret(t, testgateways.TokenGateway("t"), nil)
	address.Data[KeyEndpoint] = []byte("https://127.1:6443")
	proxy := mustToSecret(t, testgateways.TokenGateway("t"), nil)
	proxy.Data[KeyProxyURL] = []byte("socks5://0x7f000001:1080")
	for name, sec := range map[string]*corev1.Secret{"spec.endpoint.address": address, "spec.endpoint.proxyURL": proxy} {
		g := Parse(sec)
		cond := ready(t, g.Object)
		if g.Ready || cond.Status != metav1.ConditionFalse || cond.Reason != v1alpha1.ReasonInvalidSecret ||
			!strings.Contains(cond.Message, name) || !strings.Contains(cond.Message, "write it in dotted-decimal form, 127.0.0.1") {
			t.Errorf("%s: ready %v, %s %s: %q; want Ready=False %s naming %s and saying: write it in dotted-decimal form, 127.0.0.1",
				name, g.Ready, cond.Status, cond.Reason, cond.Message, v1alpha1.ReasonInvalidSecret, name)
		}
		if g.Problem != cond.Message {
			t.Errorf("%s: Problem %q, want the condition's message", name, g.Problem)
		}
	}
	if g := Parse(mustToSecret(t, testgateways.TokenGateway("t"), nil)); !g.Ready {
		t.Errorf("a well-formed gateway is not ready: %s", g.Problem)
	}
}
