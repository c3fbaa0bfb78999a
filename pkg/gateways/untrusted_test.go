package gateways

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// A kubeconfig Secret is written by whoever may write Secrets in a source
// namespace: less trusted than the gateway. The tests that hold its reading
// to bounds (docs/security.md, "Untrusted input has bounds") went to
// pkg/clusters with the resolution that reads it; FuzzKubeconfig stays
// with the parser.

// kubeconfigWith is a Cluster API-style kubeconfig with extra lines in its
// user (indented under it).
func kubeconfigWith(user string) []byte {
	return []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://10.0.0.7:6443"}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
users:
- name: u
  user:
    token: kubeconfig-token
` + user)
}

// The same version of a Secret handed over again (an informer's relist) is
// the Source already held, with its parsed material. (Moved from
// TestSourceParsedOncePerVersion, which pkg/clusters keeps with the
// resolution.)
func TestSourceRelistIsTheSameSource(t *testing.T) {
	c := validCredential(t)
	src := capiSecret("shared-kubeconfig", "1", kubeconfigBytes(t, "https://10.0.0.7:6443", c.caPEM, "token-1", nil, nil))
	client := fake.NewClientset(src)
	store := NewStore(client, testNamespace, testNamespace, sourceNamespace)
	startStore(t, store)

	// The same version handed over again is the Source already held.
	obj, _, _ := store.sources.byNamespace[sourceNamespace].GetIndexer().GetByKey(sourceNamespace + "/shared-kubeconfig")
	held := obj.(*Source)
	sec, err := client.CoreV1().Secrets(sourceNamespace).Get(t.Context(), "shared-kubeconfig", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if again := newSource(sec, held); again != held {
		t.Errorf("the same version of the Secret read again made a new Source")
	}
}
