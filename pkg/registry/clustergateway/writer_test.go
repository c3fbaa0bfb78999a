package clustergateway

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/clustergateway/cluster-gateway/internal/testgateways"
	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/endpointpolicy"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
)

const writerTestNamespace = "cluster-gateway-system"

// patched is what the generic handler hands Update for a patch of any type
// (merge, JSON, strategic, apply): the patch applied to the object Update
// passes in, which is the redacted gateway.
type patched struct{ patch string }

func (p patched) Preconditions() *metav1.Preconditions { return nil }
func (p patched) UpdatedObject(_ context.Context, old runtime.Object) (runtime.Object, error) {
	raw, err := json.Marshal(old)
	if err != nil {
		return nil, err
	}
	out, err := strategicpatch.StrategicMergePatch(raw, []byte(p.patch), &v1alpha1.ClusterGateway{})
	if err != nil {
		return nil, err
	}
	gw := &v1alpha1.ClusterGateway{}
	return gw, json.Unmarshal(out, gw)
}

var _ rest.UpdatedObjectInfo = patched{}

// A writer without the credential, on the REST's real write path (GetCurrent,
// keepMaterial, validation, the Secret write): moving a token gateway is
// refused without echoing the token, nothing is written, a dry-run and a
// label change answer without material, and the token stays on its Secret.
func TestWriterCannotMoveStoredToken(t *testing.T) {
	const token = "stored-token-0123456789abcdef"
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "c2", Namespace: writerTestNamespace, ResourceVersion: "1", Labels: map[string]string{gateways.LabelGateway: "true"}},
		Data: map[string][]byte{
			gateways.KeyEndpoint: []byte("https://127.0.0.3:6443"), gateways.KeyInsecure: []byte("true"),
			gateways.KeyProxyURL:       []byte("http://puser:ppass-9876@127.0.0.1:3128"),
			gateways.KeyCredentialType: []byte(v1alpha1.CredentialBearerToken), gateways.KeyToken: []byte(token),
		},
	}
	client := fake.NewClientset(sec)
	r := restOver(t, client)
	ctx := context.Background()

	noMaterial := func(what string, v interface{}) {
		t.Helper()
		raw, _ := json.Marshal(v)
		if s := string(raw) + what; strings.Contains(s, token) || strings.Contains(s, "ppass-9876") {
			t.Errorf("%s carries material: %s", what, raw)
		}
	}
	for _, p := range []string{
		`{"spec":{"endpoint":{"address":"https://attacker.example:443"}}}`,
		`{"spec":{"endpoint":{"additionalAddresses":["https://attacker.example:443"]}}}`,
		`{"spec":{"endpoint":{"proxyURL":"http://127.0.0.9:3128"}}}`,
		`{"spec":{"endpoint":{"proxyURL":null}}}`,
		`{"spec":{"endpoint":{"serverName":"evil.example"}}}`,
		`{"spec":{"endpoint":{"insecureSkipTLSVerify":false}}}`,
		`{"spec":{"endpoint":{"type":"Konnectivity","proxyURL":null}}}`,
		`{"spec":{"impersonation":{"mode":"Caller"}}}`,
	} {
		for _, dry := range [][]string{nil, {metav1.DryRunAll}} {
			_, _, err := r.Update(ctx, "c2", patched{p}, nil, nil, false, &metav1.UpdateOptions{DryRun: dry})
			if !apierrors.IsInvalid(err) {
				t.Errorf("patch %s (dryRun %v): %v, want 422", p, dry, err)
			}
			if err != nil {
				noMaterial("the refusal of "+p, err.Error())
				if !strings.Contains(err.Error(), "must carry") {
					t.Errorf("patch %s: %v, want the refusal to ask for the material again", p, err)
				}
			}
		}
	}
	got, _ := client.CoreV1().Secrets(writerTestNamespace).Get(ctx, "c2", metav1.GetOptions{})
	if got.ResourceVersion != "1" || string(got.Data[gateways.KeyEndpoint]) != "https://127.0.0.3:6443" {
		t.Fatalf("a refused update was written: resourceVersion %s, endpoint %q", got.ResourceVersion, got.Data[gateways.KeyEndpoint])
	}

	// Allowed: labels, with and without dry run; the answer has no material.
	for _, dry := range [][]string{{metav1.DryRunAll}, nil} {
		obj, _, err := r.Update(ctx, "c2", patched{`{"metadata":{"labels":{"team":"blue"}}}`}, nil, nil, false, &metav1.UpdateOptions{DryRun: dry})
		if err != nil {
			t.Fatalf("label change (dryRun %v): %v", dry, err)
		}
		noMaterial("the answer to a label change", obj)
	}
	got, _ = client.CoreV1().Secrets(writerTestNamespace).Get(ctx, "c2", metav1.GetOptions{})
	if string(got.Data[gateways.KeyToken]) != token || !strings.Contains(string(got.Data[gateways.KeyProxyURL]), "ppass-9876") {
		t.Fatalf("a label change lost the material: %q %q", got.Data[gateways.KeyToken], got.Data[gateways.KeyProxyURL])
	}
	// Reads, from the hub and from the cache.
	for _, rv := range []string{"", "0"} {
		obj, err := r.Get(ctx, "c2", &metav1.GetOptions{ResourceVersion: rv})
		if err != nil {
			t.Fatal(err)
		}
		noMaterial("a get", obj)
	}
	list, err := r.List(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	noMaterial("a list", list)
	table, err := r.ConvertToTable(ctx, list, nil)
	if err != nil {
		t.Fatal(err)
	}
	noMaterial("a table", table)
}

// restOver is the REST over a gateway store of client's Secrets in
// writerTestNamespace, run until the test ends, with the default endpoint
// policy.
func restOver(t *testing.T, client *fake.Clientset) *REST {
	t.Helper()
	store := gateways.NewStore(client, writerTestNamespace)
	testgateways.Run(t, store.Run, "the store to sync", store.HasSynced)
	policy, _ := endpointpolicy.DefaultConfig().Policy()
	return NewREST(store, policy, nil, nil)
}
