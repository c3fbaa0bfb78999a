package clustergateway

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// secretReaders allows "get" on Secret writerTestNamespace/readable to alice
// only, as the hub's RBAC would; it records what it was asked.
type secretReaders struct{ asked []authorizer.Attributes }

func (a *secretReaders) authorizer() authorizer.Authorizer {
	return authorizer.AuthorizerFunc(a.authorize)
}

func (a *secretReaders) authorize(_ context.Context, attr authorizer.Attributes) (authorizer.Decision, string, error) {
	a.asked = append(a.asked, attr)
	if attr.GetUser().GetName() == "alice" && attr.GetVerb() == "get" && attr.GetResource() == "secrets" &&
		attr.GetNamespace() == writerTestNamespace && attr.GetName() == "readable" && attr.IsResourceRequest() {
		return authorizer.DecisionAllow, "", nil
	}
	if attr.GetUser().GetName() == "alice" && attr.GetVerb() == "use" && attr.GetAPIGroup() == v1alpha1.GroupName &&
		attr.GetResource() == ProviderResource && attr.GetName() == "eks" && attr.IsResourceRequest() {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "no RBAC rule allows it", nil
}

func as(name string) context.Context {
	return genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: name})
}

func secretRefGateway(name, secret, address string) *v1alpha1.ClusterGateway {
	return &v1alpha1.ClusterGateway{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ClusterGatewaySpec{
			Endpoint: v1alpha1.Endpoint{Address: address},
			Credential: v1alpha1.Credential{Type: v1alpha1.CredentialSecretRef,
				SecretRef: &v1alpha1.SecretReference{Namespace: writerTestNamespace, Name: secret}},
		},
	}
}

// A writer who cannot read a credential Secret cannot make the gateway send
// it anywhere: naming it on create, or an update that changes the reference
// or where it is sent, needs get on the Secret, asked as the writer; a label
// edit does not; a namespace the gateway does not read is refused outright.
func TestNamingASecretNeedsGetOnIt(t *testing.T) {
	authz := &secretReaders{}
	client := fake.NewClientset()
	r := restOver(t, client)
	r.authz = authz.authorizer()

	if _, err := r.Create(as("mallory"), secretRefGateway("c1", "readable", ""), nil, &metav1.CreateOptions{}); !apierrors.IsForbidden(err) ||
		!strings.Contains(err.Error(), "needs permission to get it") {
		t.Fatalf("mallory names a Secret she cannot read: %v; want Forbidden", err)
	}
	if got := authz.asked[len(authz.asked)-1]; got.GetUser().GetName() != "mallory" || got.GetName() != "readable" {
		t.Errorf("asked %+v; want get secrets/readable as mallory", got)
	}
	if _, err := r.Create(as("alice"), secretRefGateway("c1", "readable", ""), nil, &metav1.CreateOptions{}); err != nil {
		t.Fatalf("alice names a Secret she can read: %v", err)
	}
	// The fake clientset sets no resourceVersion, which updates need.
	sec, err := client.CoreV1().Secrets(writerTestNamespace).Get(context.Background(), "c1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sec.ResourceVersion = "1"
	if _, err := client.CoreV1().Secrets(writerTestNamespace).Update(context.Background(), sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Create(as("alice"), secretRefGateway("c2", "other", ""), nil, &metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("alice names a Secret she cannot read: %v; want Forbidden", err)
	}
	elsewhere := secretRefGateway("c3", "readable", "")
	elsewhere.Spec.Credential.SecretRef.Namespace = "kube-system"
	if _, err := r.Create(as("alice"), elsewhere, nil, &metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "--credential-source-namespaces") {
		t.Errorf("a Secret in a namespace the gateway does not read: %v; want Invalid naming the flag", err)
	}

	for _, tc := range []struct{ what, patch string }{
		{"points the endpoint elsewhere", `{"spec":{"endpoint":{"address":"https://203.0.113.9"}}}`},
		{"names another Secret", `{"spec":{"credential":{"secretRef":{"name":"other"}}}}`},
		{"impersonates callers", `{"spec":{"impersonation":{"mode":"Caller"}}}`},
		{"skips TLS verification", `{"spec":{"endpoint":{"insecureSkipTLSVerify":true}}}`},
	} {
		if _, _, err := r.Update(as("mallory"), "c1", patched{tc.patch}, nil, nil, false, &metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("mallory %s: %v; want Forbidden", tc.what, err)
		}
	}
	if _, _, err := r.Update(as("mallory"), "c1", patched{`{"metadata":{"labels":{"team":"blue"}}}`}, nil, nil, false, &metav1.UpdateOptions{}); err != nil {
		t.Errorf("mallory edits a label, which moves no credential: %v", err)
	}
	if _, _, err := r.Update(as("alice"), "c1", patched{`{"spec":{"endpoint":{"address":"https://203.0.113.9"}}}`}, nil, nil, false, &metav1.UpdateOptions{}); err != nil {
		t.Errorf("alice, who can read the Secret, moves the endpoint: %v", err)
	}
}

// A credential provider's token goes where the gateway's endpoint says: naming
// a provider, or moving a gateway that names one, needs use on
// credentialproviders/<name>, asked as the writer; a label edit does not.
func TestNamingAProviderNeedsUseOnIt(t *testing.T) {
	authz := &secretReaders{}
	client := fake.NewClientset()
	r := restOver(t, client)
	r.authz = authz.authorizer()
	provider := func(name, provider string) *v1alpha1.ClusterGateway {
		return &v1alpha1.ClusterGateway{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.ClusterGatewaySpec{
				Endpoint:   v1alpha1.Endpoint{Address: "https://10.0.0.1:6443"},
				Credential: v1alpha1.Credential{Type: v1alpha1.CredentialProvider, Provider: &v1alpha1.ProviderReference{Name: provider}},
			},
		}
	}
	if _, err := r.Create(as("mallory"), provider("p1", "eks"), nil, &metav1.CreateOptions{}); !apierrors.IsForbidden(err) ||
		!strings.Contains(err.Error(), "needs permission to use it") {
		t.Fatalf("mallory names provider eks: %v; want Forbidden", err)
	}
	if _, err := r.Create(as("alice"), provider("p1", "eks"), nil, &metav1.CreateOptions{}); err != nil {
		t.Fatalf("alice names provider eks, which she may use: %v", err)
	}
	if _, err := r.Create(as("alice"), provider("p2", "gke"), nil, &metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("alice names provider gke: %v; want Forbidden", err)
	}
	sec, err := client.CoreV1().Secrets(writerTestNamespace).Get(context.Background(), "p1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sec.ResourceVersion = "1"
	if _, err := client.CoreV1().Secrets(writerTestNamespace).Update(context.Background(), sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Update(as("mallory"), "p1", patched{`{"spec":{"endpoint":{"address":"https://203.0.113.9"}}}`}, nil, nil, false, &metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("mallory points a provider gateway elsewhere: %v; want Forbidden", err)
	}
	if _, _, err := r.Update(as("mallory"), "p1", patched{`{"metadata":{"labels":{"team":"blue"}}}`}, nil, nil, false, &metav1.UpdateOptions{}); err != nil {
		t.Errorf("mallory edits a label: %v", err)
	}
}
