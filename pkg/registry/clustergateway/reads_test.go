package clustergateway

import (
	"context"
	"encoding/base64"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
)

// Reads show gateways and nothing else of the namespace: a Secret without the
// gateway label (or with it set to "false") is not found, fresh or cached;
// label selectors match the gateway's own labels, never the Secret's labels or
// data keys; a forged continue token is a 400, not a panic or another
// namespace's page.
func TestReadsShowOnlyGateways(t *testing.T) {
	gw := func(name string, lbl map[string]string, data map[string][]byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: writerTestNamespace, ResourceVersion: "1", Labels: lbl}, Data: data}
	}
	ok := map[string][]byte{gateways.KeyEndpoint: []byte("https://127.0.0.3:6443"), gateways.KeyInsecure: []byte("true"),
		gateways.KeyCredentialType: []byte(v1alpha1.CredentialBearerToken), gateways.KeyToken: []byte("tok"), gateways.KeyLabels: []byte(`{"env":"prod"}`)}
	client := fake.NewClientset(
		gw("a", map[string]string{gateways.LabelGateway: "true"}, ok),
		gw("hidden", map[string]string{"env": "prod"}, ok),
		gw("false", map[string]string{gateways.LabelGateway: "false"}, ok),
		gw("b", map[string]string{gateways.LabelGateway: "true", "secretlabel": "x"}, map[string][]byte{gateways.KeyEndpoint: []byte("https://127.0.0.3:6443"), "token": []byte("tok")}),
	)
	r := restOver(t, client)
	ctx := context.Background()
	for _, name := range []string{"hidden", "false"} {
		for _, rv := range []string{"", "0"} {
			if _, err := r.Get(ctx, name, &metav1.GetOptions{ResourceVersion: rv}); !apierrors.IsNotFound(err) {
				t.Errorf("get %s rv=%q: %v, want NotFound: not a gateway", name, rv, err)
			}
		}
	}
	names := func(o *metainternalversion.ListOptions) []string {
		obj, err := r.List(ctx, o)
		if err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
		var n []string
		for _, i := range obj.(*v1alpha1.ClusterGatewayList).Items {
			n = append(n, i.Name)
		}
		return n
	}
	for _, rv := range []string{"", "0"} {
		if n := names(&metainternalversion.ListOptions{ResourceVersion: rv}); len(n) != 2 {
			t.Errorf("list rv=%q: %v, want the two gateways a and b", rv, n)
		}
		for _, s := range []string{"secretlabel=x", "token", "endpoint"} {
			sel, _ := labels.Parse(s)
			if n := names(&metainternalversion.ListOptions{ResourceVersion: rv, LabelSelector: sel}); len(n) != 0 {
				t.Errorf("selector %s matched %v: not a label of the gateway", s, n)
			}
		}
	}
	for _, tok := range []string{"%%%", base64.RawURLEncoding.EncodeToString([]byte(`null`)), base64.RawURLEncoding.EncodeToString([]byte(`{"after":1}`)),
		base64.RawURLEncoding.EncodeToString([]byte(`[]`)), base64.StdEncoding.EncodeToString([]byte(`{"after":"a"}`))} {
		if _, err := r.List(ctx, &metainternalversion.ListOptions{Continue: tok, Limit: 1}); !apierrors.IsBadRequest(err) {
			t.Errorf("continue %q: %v, want 400", tok, err)
		}
	}
	if n := names(&metainternalversion.ListOptions{Continue: base64.RawURLEncoding.EncodeToString([]byte(`{"after":"cluster-gateway-system/a"}`)), Limit: 1}); len(n) > 1 {
		t.Errorf("a page of one after a token naming another namespace's key: %v", n)
	}
}
