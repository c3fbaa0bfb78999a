package e2e

import (
	"context"
	"encoding/json"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// TestProxyBearerToken reaches a managed cluster with a ServiceAccount token
// and rotates it: the cluster sees the new identity at once, and the pooled
// transport is reused (a token is injected per request, not part of the
// transport). It reads global pool counters, so it does not run in parallel.
func TestProxyBearerToken(t *testing.T) {
	requireGateway(t)
	ctx := context.Background()
	direct := managedClient(t, 0)
	token := func(sa string) string {
		t.Helper()
		if _, err := direct.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = direct.CoreV1().ServiceAccounts("default").Delete(ctx, sa, metav1.DeleteOptions{}) })
		tr, err := direct.CoreV1().ServiceAccounts("default").CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	first, second := uniqueName(t, "first"), uniqueName(t, "second")

	gw := directGateway(uniqueName(t, "token"), 0)
	gw.Spec.Credential = gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialBearerToken, BearerToken: token(first)}
	createGateway(t, gw)
	_, via := viaHub(t, gw.Name)
	whoami := func() string {
		t.Helper()
		body, err := via.AuthenticationV1().RESTClient().Post().Resource("selfsubjectreviews").
			Body([]byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)).DoRaw(ctx)
		if err != nil {
			t.Fatalf("whoami through the gateway: %v", err)
		}
		var r authenticationv1.SelfSubjectReview
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatal(err)
		}
		return r.Status.UserInfo.Username
	}

	base := gatewayMetrics(t)
	if got, want := whoami(), "system:serviceaccount:default:"+first; got != want {
		t.Fatalf("the managed cluster saw %q, want %q", got, want)
	}
	c := gatewayClient(t, env.Hub.Kubeconfig)
	cur, err := c.GatewayV1alpha1().ClusterGateways().Get(ctx, gw.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cur.Spec.Credential.BearerToken != "" {
		t.Fatal("GET returned the bearer token")
	}
	cur.Spec.Credential.BearerToken = token(second)
	if _, err := c.GatewayV1alpha1().ClusterGateways().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("rotate the token: %v", err)
	}
	eventually(t, "the rotated token to be used", func() error {
		if got, want := whoami(), "system:serviceaccount:default:"+second; got != want {
			return errorString("the managed cluster saw " + got + ", want " + want)
		}
		return nil
	})
	m := gatewayMetrics(t)
	const created = "cluster_gateway_pool_entry_creations_total"
	if got := m[created] - base[created]; got != 1 {
		t.Fatalf("a token gateway and a token rotation created %v pool entries, want 1 (the token is not part of the transport)", got)
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }
