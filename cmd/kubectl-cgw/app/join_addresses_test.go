package app

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// --additional-address names more API servers of the cluster: join writes
// them into spec.endpoint.additionalAddresses, in order.
func TestJoinAdditionalAddresses(t *testing.T) {
	var written atomic.Pointer[gatewayv1alpha1.ClusterGateway]
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/clustergateways/x"):
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Failure", Reason: metav1.StatusReasonNotFound, Code: 404,
				Details: &metav1.StatusDetails{Name: "x", Group: "gateway.clustergateway.io", Kind: "clustergateways"}})
		case strings.HasSuffix(r.URL.Path, "/selfsubjectaccessreviews"):
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","status":{"allowed":true}}`))
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/clustergateways"):
			gw := &gatewayv1alpha1.ClusterGateway{}
			if err := json.NewDecoder(r.Body).Decode(gw); err != nil {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			written.Store(gw)
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(gw)
		default:
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer hub.Close()
	dir := writeFiles(t, map[string]string{"kubeconfig": `apiVersion: v1
kind: Config
current-context: c
clusters:
- {name: c, cluster: {server: "https://10.0.0.1:6443", insecure-skip-tls-verify: true}}
users:
- {name: u, user: {token: user-token}}
contexts:
- {name: c, context: {cluster: c, user: u}}
`})
	root := NewCommand(genericiooptions.NewTestIOStreamsDiscard())
	root.SetArgs([]string{"--server", hub.URL, "--token", "hub-token", "join", "x", "--cluster-kubeconfig", filepath.Join(dir, "kubeconfig"),
		"--additional-address", "https://10.0.0.2:6443", "--additional-address", "https://10.0.0.3:6443"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	gw := written.Load()
	if gw == nil || gw.Spec.Endpoint.Address != "https://10.0.0.1:6443" ||
		!slices.Equal(gw.Spec.Endpoint.AdditionalAddresses, []string{"https://10.0.0.2:6443", "https://10.0.0.3:6443"}) {
		t.Fatalf("join wrote %+v", gw)
	}
}
