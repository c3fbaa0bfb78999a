package e2e

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
	"github.com/clustergateway/cluster-gateway/internal/testpki"
	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/generated/clientset/versioned"
)

// updateGateway applies change to the stored gateway (retrying on conflict:
// the hub's gateway answers reads from its cache) and returns the new
// resourceVersion. Omitted credential material is kept by the server while
// the endpoint and impersonation stay the same.
func updateGateway(t *testing.T, gc versioned.Interface, name string, change func(*gatewayv1alpha1.ClusterGateway)) string {
	t.Helper()
	var rv string
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		gw, err := gc.GatewayV1alpha1().ClusterGateways().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(gw)
		out, err := gc.GatewayV1alpha1().ClusterGateways().Update(context.Background(), gw, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		rv = out.ResourceVersion
		return nil
	})
	if err != nil {
		t.Fatalf("update ClusterGateway %s: %v", name, err)
	}
	return rv
}

// newClientCert issues a certificate for the same user as the environment's
// gateway user ("gateway" in system:masters), signed by ca.
func newClientCert(t *testing.T, ca *localenv.CA) *gatewayv1alpha1.X509Credential {
	t.Helper()
	c := ca.MustIssue(t, testpki.Spec{CommonName: "gateway", Organization: []string{"system:masters"}, Client: true})
	return &gatewayv1alpha1.X509Credential{Certificate: c.CertPEM, PrivateKey: c.KeyPEM}
}

// rotateCABundle adds a new, unrelated CA to the bundle (as when a cluster's
// CA is being replaced): the transport shape changes, the cluster still verifies.
func rotateCABundle(t *testing.T, cluster *localenv.Cluster) func(*gatewayv1alpha1.ClusterGateway) {
	extra := newTestCreds(t, "churn-extra").CAPEM
	return func(gw *gatewayv1alpha1.ClusterGateway) {
		gw.Spec.Endpoint.CABundle = append(append([]byte{}, cluster.CA.CertPEM...), extra...)
		// A changed CA bundle changes who is trusted with the credential:
		// the update carries the credential again (it is not kept otherwise).
		gw.Spec.Credential.X509 = &gatewayv1alpha1.X509Credential{Certificate: cluster.GatewayUser.CertPEM, PrivateKey: cluster.GatewayUser.KeyPEM}
	}
}

const churnServiceAccount = "cluster-gateway-churn"

// ensureTokenIdentity creates, on managed cluster c, a ServiceAccount bound
// to cluster-admin, whose TokenRequest tokens the token gateways use.
func ensureTokenIdentity(t *testing.T, c *localenv.Cluster) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: churnServiceAccount, Namespace: "default"}}
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: churnServiceAccount},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: churnServiceAccount, Namespace: "default"}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoleBindings().Delete(ctx, churnServiceAccount, metav1.DeleteOptions{})
		_ = cs.CoreV1().ServiceAccounts("default").Delete(ctx, churnServiceAccount, metav1.DeleteOptions{})
	})
	return cs
}

// newToken asks managed cluster cs for a fresh token of the churn ServiceAccount.
func newToken(t *testing.T, cs kubernetes.Interface) string {
	t.Helper()
	ttl := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(context.Background(), churnServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest on the managed cluster: %v", err)
	}
	return tr.Status.Token
}

// rotateTunnelCredentials gives the in-test tunnel new client material from
// the proxy-server's client CA, alternating with a CA bundle change, and
// waits until the Manager has moved to a tunnel built from it. Files are
// replaced by rename, as a kubelet updates a mounted Secret.
func (g *inTestGateway) rotateTunnelCredentials(t *testing.T, k *localenv.Konnectivity, cycle int) {
	t.Helper()
	before := g.tunnel.ID()
	if cycle%2 == 0 {
		kp, err := k.IssueClientCert(fmt.Sprintf("churn-client-%d-%d", time.Now().UnixNano(), cycle))
		if err != nil {
			t.Fatal(err)
		}
		// The key first: between the two renames the pair does not match,
		// and the Manager keeps its material until it does.
		if err := localenv.ReplaceFile(g.tunnelKey, kp.KeyPEM); err != nil {
			t.Fatal(err)
		}
		if err := localenv.ReplaceFile(g.tunnelCert, kp.CertPEM); err != nil {
			t.Fatal(err)
		}
	} else {
		bundle := append(append([]byte{}, k.ServerCA.CertPEM...), newTestCreds(t, "churn-tunnel-extra").CAPEM...)
		if bytes.Equal(bundle, k.ServerCA.CertPEM) {
			t.Fatal("unreachable")
		}
		if err := localenv.ReplaceFile(g.tunnelCA, bundle); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the in-test tunnel moves to the rotated credentials", func() error {
		if id := g.tunnel.ID(); id == before {
			return fmt.Errorf("tunnel id still %s (stats %+v)", id, g.tunnel.Stats())
		}
		return nil
	})
}
