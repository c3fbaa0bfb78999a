package clustergateway

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/clustergateway/cluster-gateway/internal/testgateways"
	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/endpointpolicy"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
)

// otherSourceNamespace is a second namespace the store reads credential Secrets from.
const otherSourceNamespace = "fleet"

// namers: "alice" may get every Secret and use every provider, "admin"
// may do anything, anyone else nothing.
func namers(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	switch u := a.GetUser().GetName(); {
	case u == "admin":
		return authorizer.DecisionAllow, "", nil
	case u == "alice" && a.GetVerb() == "get" && a.GetResource() == "secrets":
		return authorizer.DecisionAllow, "", nil
	case u == "alice" && a.GetVerb() == "use" && a.GetAPIGroup() == v1alpha1.GroupName && a.GetResource() == ProviderResource:
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "no RBAC rule allows it", nil
}

// restReadingSources is the REST over a store that reads credential
// Secrets in writerTestNamespace and otherSourceNamespace, authorized by namers.
func restReadingSources(t *testing.T, client *fake.Clientset) *REST {
	t.Helper()
	store := gateways.NewStore(client, writerTestNamespace, writerTestNamespace, otherSourceNamespace)
	testgateways.Run(t, store.Run, "the store to sync", store.HasSynced)
	policy, _ := endpointpolicy.DefaultConfig().Policy()
	return NewREST(store, policy, nil, authorizer.AuthorizerFunc(namers))
}

// mutated is an update that changes the gateway as its writer read it
// (redacted), as every patch type and a read-modify-write put reach Update.
type mutated func(*v1alpha1.ClusterGateway)

func (m mutated) Preconditions() *metav1.Preconditions { return nil }
func (m mutated) UpdatedObject(_ context.Context, old runtime.Object) (runtime.Object, error) {
	gw := old.(*v1alpha1.ClusterGateway).DeepCopy()
	m(gw)
	return gw, nil
}

var _ rest.UpdatedObjectInfo = mutated(nil)

// storeAs creates gw through the REST as admin and gives its Secret a
// resourceVersion (the fake clientset sets none, and updates need one).
func storeAs(t *testing.T, r *REST, client *fake.Clientset, gw *v1alpha1.ClusterGateway) {
	t.Helper()
	if _, err := r.Create(as("admin"), gw, nil, &metav1.CreateOptions{}); err != nil {
		t.Fatalf("create %s: %v", gw.Name, err)
	}
	secrets := client.CoreV1().Secrets(writerTestNamespace)
	sec, err := secrets.Get(context.Background(), gw.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sec.ResourceVersion = "1"
	if _, err := secrets.Update(context.Background(), sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// storedSpec is the spec of gateway name as its Secret holds it now, read
// from the hub (the fake clientset keeps resourceVersions, so the store's
// cache could not tell the versions apart).
func storedSpec(t *testing.T, client *fake.Clientset, name string) v1alpha1.ClusterGatewaySpec {
	t.Helper()
	sec, err := client.CoreV1().Secrets(writerTestNamespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return gateways.Parse(sec).Object.Spec
}
