package e2e

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
	"github.com/clustergateway/cluster-gateway/internal/testpki"
)

// TestCLIJoinErrors: each way join can fail says what went wrong and what to
// do, and leaves nothing behind, neither a ClusterGateway on the hub nor a
// ServiceAccount or ClusterRoleBinding on the managed cluster. The faults are
// real: a missing or garbage file, a closed port, a managed-cluster user
// without the right to bind roles, hub users without RBAC, and a write the
// hub's validation refuses.
func TestCLIJoinErrors(t *testing.T) {
	requireGateway(t)
	hub := env.Hub.Kubeconfig
	m1 := env.Managed[0]
	name := uniqueName(t, "cli-err")
	deleteGatewayAtEnd(t, name) // in case a case wrongly succeeds

	t.Run("unreadable kubeconfig", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "nope.kubeconfig")
		stderr := cgwFails(t, hub, "join", name, "--cluster-kubeconfig", missing)
		if !strings.Contains(stderr, "cannot read the cluster's kubeconfig "+missing+": no such file") {
			t.Errorf("missing file: %q", stderr)
		}
		garbage := filepath.Join(t.TempDir(), "garbage")
		if err := os.WriteFile(garbage, []byte("this is: [not a kubeconfig"), 0o600); err != nil {
			t.Fatal(err)
		}
		stderr = cgwFails(t, hub, "join", name, "--cluster-kubeconfig", garbage)
		if !strings.Contains(stderr, "cannot read the cluster's kubeconfig "+garbage) {
			t.Errorf("garbage file: %q", stderr)
		}
		requireNoGateway(t, name)
	})

	t.Run("unknown context", func(t *testing.T) {
		stderr := cgwFails(t, hub, "join", name, "--cluster-kubeconfig", m1.Kubeconfig, "--cluster-context", "nope")
		if !strings.Contains(stderr, `context "nope" not found in `+m1.Kubeconfig) || !strings.Contains(stderr, `"managed-1"`) {
			t.Errorf("unknown context: %q; want it to name the file and the contexts it has", stderr)
		}
		requireNoGateway(t, name)
	})

	t.Run("cluster unreachable during --service-account", func(t *testing.T) {
		closed := closedPort(t)
		a := m1.Admin
		kc := clusterKubeconfig(t, m1, "https://"+closed, &clientcmdapi.AuthInfo{ClientCertificateData: a.CertPEM, ClientKeyData: a.KeyPEM})
		sa := uniqueName(t, "cli-err-sa")
		stderr := cgwFails(t, hub, "join", name, "--cluster-kubeconfig", kc, "--service-account", "--service-account-name", sa, "--cluster-role", "view")
		if !strings.Contains(stderr, "cannot reach the cluster at https://"+closed) || !strings.Contains(stderr, "connection refused") {
			t.Errorf("unreachable: %q; want it to name the address and the cause", stderr)
		}
		requireNoGateway(t, name)
	})

	t.Run("cluster refuses a step of --service-account", func(t *testing.T) {
		// A managed-cluster user that may create the ServiceAccount but not bind
		// it: join gets halfway, then must take the ServiceAccount back.
		joiner := newSAIdentity(t, m1, uniqueName(t, "cli-half-joiner"), "view")
		direct := managedClientFor(t, m1)
		ctx := context.Background()
		cr := &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: joiner.name + "-partial"},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles", "clusterrolebindings"}, Verbs: []string{"get"}},
				{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"get", "create", "delete"}},
			},
		}
		if _, err := direct.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: cr.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: joiner.name, Namespace: joiner.namespace}},
		}
		if _, err := direct.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = direct.RbacV1().ClusterRoleBindings().Delete(ctx, crb.Name, metav1.DeleteOptions{})
			_ = direct.RbacV1().ClusterRoles().Delete(ctx, cr.Name, metav1.DeleteOptions{})
		})
		sa := uniqueName(t, "cli-half-sa")
		removeJoinServiceAccountAtEnd(t, m1, "kube-system", sa)
		kc := clusterKubeconfig(t, m1, "", &clientcmdapi.AuthInfo{Token: joiner.token(t)})
		r := cgw(t, hub, "join", name, "--cluster-kubeconfig", kc, "--service-account", "--service-account-name", sa, "--cluster-role", "view")
		if r.Err == nil {
			t.Fatalf("join succeeded without the right to bind roles: %s", r.Stdout)
		}
		if !strings.Contains(r.Stderr, "serviceaccount kube-system/"+sa+" created") {
			t.Errorf("join did not get as far as creating the ServiceAccount: %q", r.Stderr)
		}
		if !strings.Contains(r.Stderr, "refused to bind ServiceAccount kube-system/"+sa) || !strings.Contains(r.Stderr, "has been taken back") {
			t.Errorf("join said %q; want the refused step named and the ServiceAccount taken back", r.Stderr)
		}
		noServiceAccount(t, m1, "kube-system", sa)
		requireNoGateway(t, name)
	})

	t.Run("expired client certificate", func(t *testing.T) {
		// The gateway could not use it: join refuses it before asking the hub.
		certPEM, keyPEM := expiredClientCert(t, m1.CA)
		kc := clusterKubeconfig(t, m1, "", &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM})
		stderr := cgwFails(t, hub, "join", name, "--cluster-kubeconfig", kc)
		if !strings.Contains(stderr, "the client certificate of user") || !strings.Contains(stderr, "expired at") {
			t.Errorf("join of an expired certificate: %q; want the certificate named as expired", stderr)
		}
		requireNoGateway(t, name)
	})

	t.Run("hub user without RBAC", func(t *testing.T) {
		stderr := cgwFails(t, env.Alice.Kubeconfig, "join", name, "--cluster-kubeconfig", m1.Kubeconfig)
		if !strings.Contains(stderr, "the hub refused to get ClusterGateway") || !strings.Contains(stderr, `User "alice"`) {
			t.Errorf("alice: %q", stderr)
		}
		requireNoGateway(t, name)
	})

	t.Run("hub viewer, before touching the cluster", func(t *testing.T) {
		sa := uniqueName(t, "cli-viewer-sa")
		removeJoinServiceAccountAtEnd(t, m1, "kube-system", sa)
		stderr := cgwFails(t, env.Bob.Kubeconfig, "join", name, "--cluster-kubeconfig", m1.Kubeconfig,
			"--service-account", "--service-account-name", sa, "--cluster-role", "view")
		if !strings.Contains(stderr, "the hub would refuse to create ClusterGateway") || !strings.Contains(stderr, "may not create clustergateways") {
			t.Errorf("bob: %q", stderr)
		}
		noServiceAccount(t, m1, "kube-system", sa)
		requireNoGateway(t, name)
	})

	t.Run("http address, before touching the cluster", func(t *testing.T) {
		sa := uniqueName(t, "cli-http-sa")
		removeJoinServiceAccountAtEnd(t, m1, "kube-system", sa)
		stderr := cgwFails(t, hub, "join", name, "--cluster-kubeconfig", m1.Kubeconfig, "--address", "http://"+strings.TrimPrefix(m1.URL, "https://"),
			"--service-account", "--service-account-name", sa, "--cluster-role", "view")
		if !strings.Contains(stderr, "must be an https URL") {
			t.Errorf("join with an http address said %q", stderr)
		}
		noServiceAccount(t, m1, "kube-system", sa)
		requireNoGateway(t, name)
	})

	t.Run("hub refuses the write after --service-account setup", func(t *testing.T) {
		sa := uniqueName(t, "cli-refused-sa")
		removeJoinServiceAccountAtEnd(t, m1, "kube-system", sa)
		// The hub's validation refuses an address its endpoint policy denies
		// (link-local, denied by default), after join made the ServiceAccount
		// and its binding: join must take both back.
		r := cgw(t, hub, "join", name, "--cluster-kubeconfig", m1.Kubeconfig, "--address", "https://169.254.169.254:6443",
			"--service-account", "--service-account-name", sa, "--cluster-role", "view")
		if r.Err == nil {
			t.Fatalf("join with a denied address succeeded: %s", r.Stdout)
		}
		if !strings.Contains(r.Stderr, "clusterrolebinding cluster-gateway:kube-system:"+sa+" created") {
			t.Errorf("join did not get as far as binding: %q", r.Stderr)
		}
		if !strings.Contains(r.Stderr, "spec.endpoint.address") || !strings.Contains(r.Stderr, "has been taken back") {
			t.Errorf("join said %q; want the hub's refusal (spec.endpoint.address) and the cluster changes taken back", r.Stderr)
		}
		noServiceAccount(t, m1, "kube-system", sa)
		requireNoGateway(t, name)
	})
}

// expiredClientCert is a client certificate from ca that expired an hour ago.
func expiredClientCert(t *testing.T, ca *localenv.CA) (certPEM, keyPEM []byte) {
	t.Helper()
	c := ca.MustIssue(t, testpki.Spec{CommonName: "expired", Organization: []string{"system:masters"}, Client: true,
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	return c.CertPEM, c.KeyPEM
}

// closedPort is 127.0.0.1:<port> where nothing listens (the port was free a moment ago).
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
