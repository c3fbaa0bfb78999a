package gateways

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/clustergateway/cluster-gateway/internal/testgateways"
)

// A kubeconfig Secret is written by whoever may write Secrets in a source
// namespace: less trusted than the gateway. The tests that hold its reading
// to bounds (docs/security.md, "Untrusted input has bounds") went to
// pkg/clusters with the resolution that reads it; FuzzKubeconfig stays
// with the parser.

// The same version of a Secret handed over again (an informer's relist) is
// the Source already held, with its parsed material. (Moved from
// TestSourceParsedOncePerVersion, which pkg/clusters keeps with the
// resolution.)
func TestSourceRelistIsTheSameSource(t *testing.T) {
	c := testgateways.ValidCredential(t)
	src := testgateways.CAPISecret("shared-kubeconfig", "1", testgateways.KubeconfigBytes(t, "https://10.0.0.7:6443", c.CAPEM, "token-1", nil, nil))
	client := fake.NewClientset(src)
	store := NewStore(client, testNamespace, testNamespace, testgateways.SourceNamespace)
	startStore(t, store)

	// The same version handed over again is the Source already held.
	obj, _, _ := store.sources.byNamespace[testgateways.SourceNamespace].GetIndexer().GetByKey(testgateways.SourceNamespace + "/shared-kubeconfig")
	held := obj.(*Source)
	sec, err := client.CoreV1().Secrets(testgateways.SourceNamespace).Get(t.Context(), "shared-kubeconfig", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if again := newSource(sec, held); again != held {
		t.Errorf("the same version of the Secret read again made a new Source")
	}
}
