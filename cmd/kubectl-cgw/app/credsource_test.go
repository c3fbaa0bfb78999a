package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes/scheme"

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// sourceHub is a hub that serves what join asks of it: the gateway (absent
// until created), access reviews, and Secrets.
type sourceHub struct {
	mu       sync.Mutex
	secrets  map[string]map[string][]byte // "ns/name" -> data
	denied   map[string]bool              // "ns/name" the caller may not get
	ready    metav1.ConditionStatus       // the Ready status the created gateway reports
	reviews  []authorizationv1.ResourceAttributes
	created  []gatewayv1alpha1.ClusterGateway
	getsSecr int
	srv      *httptest.Server
}

func newSourceHub(t *testing.T) *sourceHub {
	h := &sourceHub{secrets: map[string]map[string][]byte{}, denied: map[string]bool{}, ready: metav1.ConditionTrue}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.srv.Close)
	return h
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func notFound(w http.ResponseWriter, name, group, kind string) {
	writeJSON(w, http.StatusNotFound, metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Failure",
		Reason: metav1.StatusReasonNotFound, Code: 404, Details: &metav1.StatusDetails{Name: name, Group: group, Kind: kind}})
}

func (h *sourceHub) serve(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	const gws = "/apis/gateway.clustergateway.io/v1alpha1/clustergateways"
	switch {
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, gws+"/"):
		name := strings.TrimPrefix(r.URL.Path, gws+"/")
		for _, gw := range h.created {
			if gw.Name == name {
				writeJSON(w, http.StatusOK, h.withStatus(gw))
				return
			}
		}
		notFound(w, name, "gateway.clustergateway.io", "clustergateways")
	case r.Method == http.MethodPost && r.URL.Path == gws:
		var gw gatewayv1alpha1.ClusterGateway
		if err := json.NewDecoder(r.Body).Decode(&gw); err != nil {
			writeJSON(w, http.StatusBadRequest, metav1.Status{Status: "Failure", Code: 400, Message: err.Error()})
			return
		}
		h.created = append(h.created, gw)
		writeJSON(w, http.StatusCreated, h.withStatus(gw))
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/selfsubjectaccessreviews"):
		// client-go may send built-in types as protobuf.
		body, _ := io.ReadAll(r.Body)
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil)
		review, ok := obj.(*authorizationv1.SelfSubjectAccessReview)
		if err != nil || !ok || review.Spec.ResourceAttributes == nil {
			writeJSON(w, http.StatusBadRequest, metav1.Status{Status: "Failure", Code: 400, Message: fmt.Sprintf("not a review: %v", err)})
			return
		}
		a := review.Spec.ResourceAttributes
		h.reviews = append(h.reviews, *a)
		review.Status.Allowed = !(a.Resource == "secrets" && h.denied[a.Namespace+"/"+a.Name])
		review.APIVersion, review.Kind = "authorization.k8s.io/v1", "SelfSubjectAccessReview"
		writeJSON(w, http.StatusCreated, review)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/api/v1/namespaces/"):
		h.getsSecr++
		parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/api/v1/namespaces/"), "/") // ns, secrets, name
		data, ok := h.secrets[parts[0]+"/"+parts[2]]
		if len(parts) != 3 || !ok {
			notFound(w, parts[len(parts)-1], "", "secrets")
			return
		}
		writeJSON(w, http.StatusOK, corev1.Secret{TypeMeta: metav1.TypeMeta{Kind: "Secret", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Namespace: parts[0], Name: parts[2]}, Data: data})
	default:
		writeJSON(w, http.StatusNotImplemented, metav1.Status{Status: "Failure", Code: 501, Message: r.Method + " " + r.URL.Path})
	}
}

func (h *sourceHub) withStatus(gw gatewayv1alpha1.ClusterGateway) gatewayv1alpha1.ClusterGateway {
	gw.APIVersion, gw.Kind = "gateway.clustergateway.io/v1alpha1", "ClusterGateway"
	reason := "Valid"
	if h.ready != metav1.ConditionTrue {
		reason = gatewayv1alpha1.ReasonSourceNotFound
	}
	gw.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: h.ready, Reason: reason, Message: "from the test hub"}}
	if ref := gw.Spec.Credential.SecretRef; ref != nil {
		gw.Status.Credential = &gatewayv1alpha1.CredentialStatus{Source: "Secret " + ref.Namespace + "/" + ref.Name}
	}
	return gw
}

// join runs `kubectl-cgw join x args...` against the hub.
func (h *sourceHub) join(args ...string) (string, error) {
	var out bytes.Buffer
	root := NewCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out})
	root.SetArgs(append([]string{"--server", h.srv.URL, "--token", "hub-token", "join", "x"}, args...))
	err := root.Execute()
	return out.String(), err
}

func (h *sourceHub) createdGateway(t *testing.T) *gatewayv1alpha1.ClusterGateway {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.created) != 1 {
		t.Fatalf("the hub got %d creates, want 1", len(h.created))
	}
	return &h.created[0]
}

func (h *sourceHub) nothingCreated(t *testing.T, err error) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.created) != 0 {
		t.Errorf("the hub got %d creates (join err %v); want nothing written", len(h.created), err)
	}
}

func TestJoinNamesASecret(t *testing.T) {
	t.Run("a kubeconfig Secret needs no cluster kubeconfig or address", func(t *testing.T) {
		h := newSourceHub(t)
		h.secrets["capi/prod-kubeconfig"] = map[string][]byte{"value": []byte("apiVersion: v1\nkind: Config\n")}
		out, err := h.join("--credential-secret", "capi/prod-kubeconfig")
		if err != nil {
			t.Fatalf("join: %v\n%s", err, out)
		}
		gw := h.createdGateway(t)
		c := gw.Spec.Credential
		if c.Type != gatewayv1alpha1.CredentialSecretRef || c.SecretRef == nil ||
			*c.SecretRef != (gatewayv1alpha1.SecretReference{Namespace: "capi", Name: "prod-kubeconfig"}) || c.X509 != nil || c.BearerToken != "" {
			t.Errorf("credential %+v (ref %+v), want SecretRef capi/prod-kubeconfig with no format and no material", c, c.SecretRef)
		}
		if ep := gw.Spec.Endpoint; ep.Address != "" || len(ep.CABundle) > 0 || ep.Type != gatewayv1alpha1.EndpointDirect {
			t.Errorf("endpoint %+v, want Direct with no address (the kubeconfig Secret names it)", ep)
		}
		if !h.reviewed("get", "secrets", "capi", "prod-kubeconfig") {
			t.Errorf("join did not ask whether the caller may get the Secret (reviews %+v)", h.reviews)
		}
		if !strings.Contains(out, "reads its credential from Secret capi/prod-kubeconfig") {
			t.Errorf("join printed %q, want it to say where the gateway reads the credential", out)
		}
	})

	t.Run("a token Secret with an address", func(t *testing.T) {
		h := newSourceHub(t)
		out, err := h.join("--credential-secret", "ocm/sa-token", "--credential-secret-format", "Token", "--address", "https://10.0.0.1:6443", "--server-name", "api.internal")
		if err != nil {
			t.Fatalf("join: %v\n%s", err, out)
		}
		gw := h.createdGateway(t)
		if ref := gw.Spec.Credential.SecretRef; ref == nil || ref.Format != gatewayv1alpha1.SecretFormatToken || ref.Namespace != "ocm" || ref.Name != "sa-token" {
			t.Errorf("ref %+v, want ocm/sa-token as Token", ref)
		}
		if ep := gw.Spec.Endpoint; ep.Address != "https://10.0.0.1:6443" || ep.ServerName != "api.internal" {
			t.Errorf("endpoint %+v, want --address and --server-name", ep)
		}
		if h.getsSecr != 0 {
			t.Errorf("join read the Secret %d times though --address was given", h.getsSecr)
		}
	})

	t.Run("the endpoint from a cluster kubeconfig whose user runs a plugin", func(t *testing.T) {
		h := newSourceHub(t)
		dir := sourceDir(t)
		out, err := h.join("--cluster-kubeconfig", filepath.Join(dir, "kubeconfig"), "--cluster-context", "exec", "--credential-secret", "certs/prod-client")
		if err != nil {
			t.Fatalf("join: %v\n%s", err, out)
		}
		gw := h.createdGateway(t)
		if ep := gw.Spec.Endpoint; ep.Address != "https://10.0.0.1:6443" || string(ep.CABundle) != "CA PEM" || ep.ServerName != "api.internal" {
			t.Errorf("endpoint %+v, want the kubeconfig's server, CA and tls-server-name", ep)
		}
		if c := gw.Spec.Credential; c.Type != gatewayv1alpha1.CredentialSecretRef || c.BearerToken != "" || c.X509 != nil {
			t.Errorf("credential %+v, want only the Secret reference, nothing of the kubeconfig's user", c)
		}
	})

	for _, c := range []struct {
		name    string
		secrets map[string]map[string][]byte
		args    []string
		want    []string
	}{
		{"a token Secret without an address", map[string]map[string][]byte{"ocm/tok": {"token": []byte("t"), "ca.crt": []byte("CA")}},
			[]string{"--credential-secret", "ocm/tok"}, []string{"Secret ocm/tok", "holds no kubeconfig", "pass --address"}},
		{"a declared TLS Secret without an address", nil,
			[]string{"--credential-secret", "certs/c", "--credential-secret-format", "TLS"}, []string{"a TLS Secret names no server", "pass --address"}},
		{"a missing Secret without an address", nil,
			[]string{"--credential-secret", "capi/later"}, []string{"does not exist", "--credential-secret-format Kubeconfig"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newSourceHub(t)
			h.secrets = c.secrets
			out, err := h.join(c.args...)
			for _, w := range c.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("err %v (output %q), want it to contain %q", err, out, w)
				}
			}
			h.nothingCreated(t, err)
		})
	}

	t.Run("a Secret the caller may not get", func(t *testing.T) {
		h := newSourceHub(t)
		h.denied["kube-system/admin-token"] = true
		_, err := h.join("--credential-secret", "kube-system/admin-token", "--address", "https://10.0.0.1:6443")
		if err == nil || !strings.Contains(err.Error(), "you may not get it") || !strings.Contains(err.Error(), "get on secrets in namespace kube-system") {
			t.Errorf("err %v, want the Secret refused before the write, saying which permission is missing", err)
		}
		h.nothingCreated(t, err)
	})

	t.Run("a gateway that does not become Ready", func(t *testing.T) {
		defer func(d time.Duration) { sourceReadyWait = d }(sourceReadyWait)
		sourceReadyWait = 600 * time.Millisecond
		h := newSourceHub(t)
		h.ready = metav1.ConditionFalse
		start := time.Now()
		_, err := h.join("--credential-secret", "ocm/tok", "--address", "https://10.0.0.1:6443")
		if err == nil || !strings.Contains(err.Error(), "not Ready: SourceNotFound") {
			t.Errorf("err %v, want join to fail naming the reason", err)
		}
		if time.Since(start) < sourceReadyWait {
			t.Errorf("join gave up after %s, before waiting %s for the gateway to read its source", time.Since(start), sourceReadyWait)
		}
	})
}

func (h *sourceHub) reviewed(verb, resource, ns, name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, a := range h.reviews {
		if a.Verb == verb && a.Resource == resource && a.Namespace == ns && a.Name == name {
			return true
		}
	}
	return false
}

func TestJoinNamesAProvider(t *testing.T) {
	dir := sourceDir(t)
	cfgFile := filepath.Join(writeFiles(t, map[string]string{"eks.yaml": "clusterName: prod-ap\nregion: ap-south-1\n"}), "eks.yaml")
	for _, c := range []struct {
		name, wantConfig string
		args             []string
	}{
		{"inline JSON", `{"clusterName":"prod-ap","region":"ap-south-1"}`, []string{"--provider-config", `{"region": "ap-south-1", "clusterName": "prod-ap"}`}},
		{"a YAML file", `{"clusterName":"prod-ap","region":"ap-south-1"}`, []string{"--provider-config-file", cfgFile}},
		{"no config", "", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newSourceHub(t)
			// The exec user's kubeconfig gives the endpoint; the provider the credential.
			args := append([]string{"--cluster-kubeconfig", filepath.Join(dir, "kubeconfig"), "--cluster-context", "exec", "--credential-provider", "eks"}, c.args...)
			out, err := h.join(args...)
			if err != nil {
				t.Fatalf("join: %v\n%s", err, out)
			}
			gw := h.createdGateway(t)
			p := gw.Spec.Credential.Provider
			if gw.Spec.Credential.Type != gatewayv1alpha1.CredentialProvider || p == nil || p.Name != "eks" {
				t.Fatalf("credential %+v, want Provider eks", gw.Spec.Credential)
			}
			got := ""
			if p.Config != nil {
				got = string(p.Config.Raw)
			}
			if got != c.wantConfig {
				t.Errorf("config %s, want %s", got, c.wantConfig)
			}
			if gw.Spec.Endpoint.Address != "https://10.0.0.1:6443" || string(gw.Spec.Endpoint.CABundle) != "CA PEM" {
				t.Errorf("endpoint %+v, want the kubeconfig's", gw.Spec.Endpoint)
			}
		})
	}

	t.Run("a config that is not an object", func(t *testing.T) {
		h := newSourceHub(t)
		_, err := h.join("--address", "https://10.0.0.1:6443", "--credential-provider", "eks", "--provider-config", `["prod"]`)
		if err == nil || !strings.Contains(err.Error(), "--provider-config is not an object") {
			t.Errorf("err %v, want the config refused as not an object", err)
		}
		h.nothingCreated(t, err)
	})
}

func TestJoinSourceFlagConflicts(t *testing.T) {
	h := newSourceHub(t)
	kc := filepath.Join(sourceDir(t), "kubeconfig")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--credential-secret", "a/b", "--credential-provider", "eks", "--address", "https://10.0.0.1"}, "choose one"},
		{[]string{"--credential-secret", "a/b", "--cluster-kubeconfig", kc, "--service-account", "--cluster-role", "view"}, "--credential-secret names where the gateway reads the credential, and --service-account creates one"},
		{[]string{"--credential-provider", "eks", "--cluster-kubeconfig", kc, "--service-account", "--cluster-role", "view"}, "--credential-provider names where"},
		{[]string{"--credential-secret-format", "Token", "--cluster-kubeconfig", kc}, "only applies with --credential-secret"},
		{[]string{"--provider-config", "{}", "--cluster-kubeconfig", kc}, "only apply with --credential-provider"},
		{[]string{"--credential-provider", "eks", "--address", "https://10.0.0.1", "--provider-config", "{}", "--provider-config-file", "f"}, "choose one"},
		{[]string{"--credential-provider", "eks"}, "pass --address URL, or --cluster-kubeconfig"},
		{[]string{"--credential-secret", "b", "--address", "https://10.0.0.1"}, "must be NAMESPACE/NAME"},
		{[]string{"--credential-secret", "a/b/c", "--address", "https://10.0.0.1"}, "must be NAMESPACE/NAME"},
		{[]string{"--credential-secret", "A_b/c", "--address", "https://10.0.0.1"}, "is not a namespace name"},
		{[]string{"--credential-secret", "a/b", "--credential-secret-format", "token", "--address", "https://10.0.0.1"}, "must be Kubeconfig, Token or TLS"},
		{[]string{"--credential-provider", "Not A Name", "--address", "https://10.0.0.1"}, "--credential-providers-file"},
		{[]string{"--credential-secret", "a/b", "--cluster-context", "cert"}, "--cluster-context only applies with --cluster-kubeconfig"},
		{[]string{"--credential-secret", "a/b", "--address", "http://10.0.0.1:6443"}, "the cluster's address"},
		{nil, "--cluster-kubeconfig is required"},
	} {
		_, err := h.join(c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("join %s: err %v, want it to contain %q", strings.Join(c.args, " "), err, c.want)
		}
	}
	h.nothingCreated(t, nil)
}
