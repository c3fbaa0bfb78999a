package app

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// --overwrite must not write the credentials into the existing file's inode:
// its old (wider) mode lets anyone open it until the chmod, and whoever opened
// it before keeps reading through that descriptor after the chmod.
func TestKubeconfigOverwriteWritesANewFile(t *testing.T) {
	out := filepath.Join(t.TempDir(), "prod.kubeconfig")
	if err := os.WriteFile(out, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(out, 0o644); err != nil {
		t.Fatal(err)
	}
	reader, err := os.Open(out) // another user's reader, opened while the file was 0644
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()

	kc := clientcmdapi.NewConfig()
	kc.AuthInfos["me"] = &clientcmdapi.AuthInfo{Token: "hub-secret-token"}
	kc.Clusters["c1"] = &clientcmdapi.Cluster{Server: "https://hub/apis/gateway.clustergateway.io/v1alpha1/clustergateways/c1/proxy"}
	kc.Contexts["c1"] = &clientcmdapi.Context{Cluster: "c1", AuthInfo: "me"}
	kc.CurrentContext = "c1"
	h := newHub(genericiooptions.NewTestIOStreamsDiscard())
	o := &kubeconfigOptions{output: out, overwrite: true}
	if err := o.write(h, kc); err != nil {
		t.Fatal(err)
	}
	leaked, _ := io.ReadAll(reader)
	if strings.Contains(string(leaked), "hub-secret-token") {
		t.Errorf("the hub token was written into the existing 0644 file: a descriptor opened before reads it:\n%s", leaked)
	}
}

// A symlink at the output path is an existing file: without --overwrite,
// nothing may be written through it.
func TestKubeconfigRefusesASymlinkAtTheOutput(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere", "planted")
	if err := os.MkdirAll(filepath.Dir(target), 0o777); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "prod.kubeconfig")
	if err := os.Symlink(target, out); err != nil {
		t.Fatal(err)
	}
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/selfsubjectaccessreviews") {
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","status":{"allowed":true}}`))
			return
		}
		_, _ = w.Write([]byte(`{"apiVersion":"gateway.clustergateway.io/v1alpha1","kind":"ClusterGateway","metadata":{"name":"c1"}}`))
	}))
	defer hub.Close()
	root := NewCommand(genericiooptions.NewTestIOStreamsDiscard())
	root.SetArgs([]string{"--server", hub.URL, "--token", "hub-secret-token", "kubeconfig", "c1", "-o", out})
	err := root.Execute()
	if _, statErr := os.Lstat(target); statErr == nil {
		t.Errorf("a file was created at the symlink's target %s", target)
	}
	if err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("err %v, want the symlink refused as an existing output without --overwrite", err)
	}
}

// --service-account must not mint and store a token for a ServiceAccount that
// join did not create: it carries whatever that account is already bound to,
// not (only) --cluster-role. Bindings are already guarded this way.
func TestServiceAccountRefusesOneJoinDidNotMake(t *testing.T) {
	cs := fake.NewSimpleClientset(
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "view"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "cluster-gateway", Namespace: "kube-system"}}, // not join's: no managed-by label
	)
	var minted atomic.Bool
	cs.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		minted.Store(true)
		return true, &authenticationv1.TokenRequest{Status: authenticationv1.TokenRequestStatus{Token: "sa-token"}}, nil
	})
	s := &serviceAccountSetup{
		serviceAccountOptions: &serviceAccountOptions{name: "cluster-gateway", namespace: "kube-system", clusterRole: "view", duration: 3600e9},
		src:                   &source{}, cs: cs, log: func(string, ...any) {},
	}
	tok, err := s.run(context.Background())
	if err == nil || minted.Load() {
		t.Errorf("join minted a token (%q, err %v) for kube-system/cluster-gateway, a ServiceAccount it did not create", tok, err)
	}
}

// A kubeconfig user that impersonates (as:) another identity cannot be stored
// as it is: the gateway would act as the credential's own, wider identity.
func TestJoinRefusesAnImpersonatingKubeconfig(t *testing.T) {
	dir := writeFiles(t, map[string]string{"kubeconfig": `apiVersion: v1
kind: Config
current-context: limited
clusters:
- {name: c, cluster: {server: "https://10.0.0.1:6443"}}
users:
- name: admin-as-viewer
  user: {token: admin-token, as: read-only-user, as-groups: [viewers]}
contexts:
- {name: limited, context: {cluster: c, user: admin-as-viewer}}
`})
	src, err := loadSource(filepath.Join(dir, "kubeconfig"), "")
	if err != nil {
		t.Fatal(err)
	}
	if cred, err := src.credential(); err == nil {
		t.Errorf("stored %s %q for a kubeconfig that acts as read-only-user: the gateway would act as the token's own identity", cred.Type, cred.BearerToken)
	}
}

// join must refuse an endpoint the hub will refuse (http://) before it
// touches the cluster: otherwise --service-account creates a ServiceAccount
// and a binding there and receives a year-long token over cleartext first.
func TestJoinChecksTheAddressBeforeTheCluster(t *testing.T) {
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
		default:
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Invalid","code":422,"message":"spec.endpoint.address: must be an https URL"}`))
		}
	}))
	defer hub.Close()
	var clusterRequests atomic.Int32
	cluster := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		clusterRequests.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer cluster.Close()
	dir := writeFiles(t, map[string]string{"kubeconfig": `apiVersion: v1
kind: Config
current-context: c
clusters:
- {name: c, cluster: {server: "` + cluster.URL + `"}}
users:
- {name: u, user: {token: user-token}}
contexts:
- {name: c, context: {cluster: c, user: u}}
`})
	root := NewCommand(genericiooptions.NewTestIOStreamsDiscard())
	root.SetArgs([]string{"--server", hub.URL, "--token", "hub-token", "join", "x", "--cluster-kubeconfig", filepath.Join(dir, "kubeconfig"),
		"--service-account", "--cluster-role", "view"})
	err := root.Execute()
	if n := clusterRequests.Load(); n > 0 {
		t.Errorf("join sent %d requests to the http:// cluster (err: %v); want the address refused before any", n, err)
	}
}

// A cluster address or proxy-url whose host is an IPv4 address in a form
// other than dotted decimal (127.1 and 0x7f000001 are 127.0.0.1 to a forward
// proxy or a cgo resolver) is refused as the hub would refuse it, before
// anything is sent to the cluster or written on the hub, saying what to write.
func TestJoinRefusesHostsInOtherIPv4Forms(t *testing.T) {
	var hubWrites atomic.Int32
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
		default:
			hubWrites.Add(1)
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer hub.Close()
	var clusterRequests atomic.Int32
	cluster := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		clusterRequests.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer cluster.Close()
	port := cluster.URL[strings.LastIndexByte(cluster.URL, ':')+1:]
	for _, tc := range []struct {
		name, server, proxyURL string
		args                   []string
		want                   string
	}{
		{"server", "https://127.1:" + port, "", []string{"--service-account", "--cluster-role", "view"}, "address"},
		{"--address", cluster.URL, "", []string{"--address", "https://2130706433:" + port}, "address"},
		{"--additional-address", cluster.URL, "", []string{"--additional-address", "https://0x7f000001:" + port}, "address"},
		{"proxy-url", cluster.URL, "http://0x7f000001:3128", nil, "proxy-url"},
	} {
		proxy := ""
		if tc.proxyURL != "" {
			proxy = ", proxy-url: " + tc.proxyURL
		}
		dir := writeFiles(t, map[string]string{"kubeconfig": `apiVersion: v1
kind: Config
current-context: c
clusters:
- {name: c, cluster: {server: "` + tc.server + `", insecure-skip-tls-verify: true` + proxy + `}}
users:
- {name: u, user: {token: user-token}}
contexts:
- {name: c, context: {cluster: c, user: u}}
`})
		root := NewCommand(genericiooptions.NewTestIOStreamsDiscard())
		root.SetArgs(append([]string{"--server", hub.URL, "--token", "hub-token", "join", "x", "--cluster-kubeconfig", filepath.Join(dir, "kubeconfig")}, tc.args...))
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "write it in dotted-decimal form, 127.0.0.1") {
			t.Errorf("%s: %v, want the %s refused, saying: write it in dotted-decimal form, 127.0.0.1", tc.name, err, tc.want)
		}
	}
	if n, m := clusterRequests.Load(), hubWrites.Load(); n+m > 0 {
		t.Errorf("join sent %d requests to the cluster and %d writes to the hub; want the hosts refused before any", n, m)
	}
}
