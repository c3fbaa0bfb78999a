package e2e

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// TestCLIJoinBySecretReference joins a managed cluster with kubectl-cgw by
// naming a hub Secret that holds a ServiceAccount token and the cluster's CA
// (as OCM managed-serviceaccount keeps them) instead of copying a
// credential, and uses the cluster through the hub with the real kubectl.
func TestCLIJoinBySecretReference(t *testing.T) {
	requireGateway(t)
	hub, m := env.Hub.Kubeconfig, env.Managed[1]
	ctx := context.Background()
	id := newSAIdentity(t, m, uniqueName(t, "cli-src-user"), "cluster-admin")

	hc, err := kubernetes.NewForConfig(env.Hub.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ns, secretName := localenv.GatewayNamespace, uniqueName(t, "cli-src-token")
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: ns},
		Data:       map[string][]byte{"token": []byte(id.token(t)), "ca.crt": m.CA.CertPEM},
	}
	if _, err := hc.CoreV1().Secrets(ns).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the token Secret on the hub: %v", err)
	}
	t.Cleanup(func() { _ = hc.CoreV1().Secrets(ns).Delete(context.Background(), secretName, metav1.DeleteOptions{}) })

	name := uniqueName(t, "cli-src")
	deleteGatewayAtEnd(t, name)
	r := mustCgw(t, hub, "join", name, "--credential-secret", ns+"/"+secretName, "--address", m.URL)
	if !strings.Contains(r.Stdout, name+" created") || !strings.Contains(r.Stdout, "reads its credential from Secret "+ns+"/"+secretName) {
		t.Errorf("join printed %q, want the gateway created, reading its credential from the Secret", r.Stdout)
	}
	gw := getGateway(t, name)
	if c := gw.Spec.Credential; c.Type != gatewayv1alpha1.CredentialSecretRef || c.SecretRef == nil || c.SecretRef.Namespace != ns || c.SecretRef.Name != secretName {
		t.Errorf("credential %+v, want SecretRef %s/%s", c, ns, secretName)
	}
	if gw.Spec.Endpoint.Address != m.URL || len(gw.Spec.Endpoint.CABundle) > 0 {
		t.Errorf("endpoint %s (CA %d bytes), want %s with the CA left to the Secret's ca.crt", gw.Spec.Endpoint.Address, len(gw.Spec.Endpoint.CABundle), m.URL)
	}
	requireReady(t, gw)

	kc := writeGatewayKubeconfig(t, hub, name)
	if out := mustKubectl(t, kc, "get", "ns", "-o", "name"); !strings.Contains(out, "namespace/kube-system") {
		t.Errorf("kubectl get ns through the hub printed %q, want the managed cluster's namespaces", out)
	}
	if user := whoamiThrough(t, kc); user != "system:serviceaccount:default:"+id.name {
		t.Errorf("the cluster saw %q, want the Secret's ServiceAccount %s", user, id.name)
	}
}
