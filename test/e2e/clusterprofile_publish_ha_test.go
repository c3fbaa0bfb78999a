package e2e

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
	"github.com/clustergateway/cluster-gateway/internal/testpki"
	"github.com/clustergateway/cluster-gateway/pkg/inventory"
	"github.com/clustergateway/cluster-gateway/pkg/publish"
)

// publishAuditIP is the audited hub kube-apiserver's own loopback address
// (tracing uses .244 and .245, the JWT replica .243).
const publishAuditIP = "127.0.0.246"

// publishAuditPolicy records every write to ClusterProfiles and Leases, with
// who made it, and nothing else.
const publishAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
  - level: Metadata
    verbs: ["create", "update", "patch", "delete", "deletecollection"]
    resources:
      - group: multicluster.x-k8s.io
        resources: ["clusterprofiles", "clusterprofiles/status"]
      - group: coordination.k8s.io
        resources: ["leases"]
  - level: None
`

// writeEvent is one audited write.
type writeEvent struct {
	Verb string `json:"verb"`
	User struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef struct {
		Resource    string `json:"resource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

func (e writeEvent) String() string {
	r := e.ObjectRef
	return fmt.Sprintf("%s %s %s/%s/%s (%d) by %s", e.Verb, r.Resource, r.Namespace, r.Name, r.Subresource, e.ResponseStatus.Code, e.User.Username)
}

// auditWrites are the audited writes in the log at path, in the order the
// hub completed them.
func auditWrites(t *testing.T, path string) []writeEvent {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []writeEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e writeEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err == nil {
			out = append(out, e)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// holderChecked checks that every ClusterProfile write of namespace ns in
// events, attempted or done, was made by the user whose Lease write (the
// inventory sync's, which the publisher holds) last succeeded before it.
// It returns the users who wrote ClusterProfiles and the last Lease holder.
func holderChecked(t *testing.T, events []writeEvent, ns, lease string) (writers []string, holder string) {
	t.Helper()
	for _, e := range events {
		r := e.ObjectRef
		switch {
		case r.Resource == "leases" && r.Namespace == localenv.GatewayNamespace && r.Name == lease && e.ResponseStatus.Code < 300:
			holder = e.User.Username
		case r.Resource == "clusterprofiles" && r.Namespace == ns:
			if e.User.Username != holder {
				t.Errorf("%v: a ClusterProfile write by a replica that did not hold the Lease (holder: %q)", e, holder)
			}
			if !slices.Contains(writers, e.User.Username) {
				writers = append(writers, e.User.Username)
			}
		}
	}
	return writers, holder
}

// copyGatewayBindings binds ServiceAccount sa of the gateway's namespace to
// every role the environment's gateway ServiceAccount is bound to (config/,
// the inventory sync's and the publisher's RBAC), until the test ends.
func copyGatewayBindings(t *testing.T, sa string) {
	t.Helper()
	ctx := context.Background()
	admin := hubAdmin(t)
	isGateway := func(s rbacv1.Subject) bool {
		return s.Kind == rbacv1.ServiceAccountKind && s.Name == "cluster-gateway" && s.Namespace == localenv.GatewayNamespace
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: localenv.GatewayNamespace}}
	crbs, err := admin.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, b := range crbs.Items {
		if !slices.ContainsFunc(b.Subjects, isGateway) {
			continue
		}
		c := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: b.Name + ":" + sa}, RoleRef: b.RoleRef, Subjects: subject}
		if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), c.Name, metav1.DeleteOptions{})
		})
		n++
	}
	rbs, err := admin.RbacV1().RoleBindings("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range rbs.Items {
		if !slices.ContainsFunc(b.Subjects, isGateway) {
			continue
		}
		c := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: b.Name + ":" + sa, Namespace: b.Namespace}, RoleRef: b.RoleRef, Subjects: subject}
		if _, err := admin.RbacV1().RoleBindings(b.Namespace).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = admin.RbacV1().RoleBindings(c.Namespace).Delete(context.Background(), c.Name, metav1.DeleteOptions{})
		})
		n++
	}
	if n == 0 {
		t.Fatal("the gateway's ServiceAccount is bound to nothing: the environment's RBAC is not what this test expects")
	}
}

// TestClusterProfilePublishTwoReplicas runs two gateway replicas with the
// ClusterProfile sync and the publisher on against one hub kube-apiserver
// that audits every write to ClusterProfiles and Leases, each replica as a
// ServiceAccount of its own (the shipped RBAC, bound to both), so the audit
// log tells which replica wrote. Every ClusterProfile write, attempted or
// done, is by the replica that last renewed the Lease; over 60 s of an
// unchanged fleet (a published gateway's own profile, a synced gateway's
// entry beside another provider's) nothing writes a ClusterProfile (audit
// log and resourceVersions); the leader killed (by pid), the other replica
// takes the Lease, publishes a new gateway, and puts back the
// cluster-manager label a profile editor changed on an owned profile; a
// changed --publish-hub-ca-file is published into every entry without a
// restart. It restarts the gateway, so it does not run in parallel.
func TestClusterProfilePublishTwoReplicas(t *testing.T) {
	requireGateway(t)
	ctx := context.Background()
	admin := hubAdmin(t)
	ns := publishNamespace(t, "pubha")

	// Replica b's own identity: a second ServiceAccount with the same bindings.
	saB := uniqueName(t, "cluster-gateway-b")
	sas := admin.CoreV1().ServiceAccounts(localenv.GatewayNamespace)
	if _, err := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: saB}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sas.Delete(context.Background(), saB, metav1.DeleteOptions{}) })
	copyGatewayBindings(t, saB)
	ttl := int64(3600)
	tr, err := sas.CreateToken(ctx, saB, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	userA := "system:serviceaccount:" + localenv.GatewayNamespace + ":cluster-gateway"
	userB := "system:serviceaccount:" + localenv.GatewayNamespace + ":" + saB

	// The audited hub kube-apiserver, which both replicas talk to.
	dir := t.TempDir()
	policy := filepath.Join(dir, "audit-policy.yaml")
	writeFile(t, policy, publishAuditPolicy)
	auditLog := filepath.Join(env.StateDir, "logs", "audit-"+ns+".log")
	hub, err := env.StartAPIServerReplica(ctx, env.Hub, publishAuditIP, "--audit-policy-file="+policy, "--audit-log-path="+auditLog)
	if err != nil {
		t.Fatalf("an audited hub kube-apiserver: %v", err)
	}
	t.Cleanup(func() { _ = env.StopCluster(hub) })
	kubeconfigA := kubeconfigFile(t, filepath.Join(dir, "a.kubeconfig"), hub.URL, env.Hub.CA.CertPEM, &clientcmdapi.AuthInfo{Token: env.Gateway.Token})
	kubeconfigB := kubeconfigFile(t, filepath.Join(dir, "b.kubeconfig"), hub.URL, env.Hub.CA.CertPEM, &clientcmdapi.AuthInfo{Token: tr.Status.Token})

	providersFile := filepath.Join(dir, "providers.yaml")
	writeFile(t, providersFile, `apiVersion: gateway.clustergateway.io/v1alpha1
kind: CredentialProviderConfig
providers:
- name: `+e2eProvider+`
  exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/false}
`)
	label := "e2e-publish-ha"
	caFile := hubCAFile(t)
	// Lease timing as TestInventorySync's (a 4s renew deadline holds under -race on a loaded machine).
	args := append(haArgs(), "--credential-source-namespaces="+ns, "--inventory-sync=clusterprofile",
		"--credential-providers-file="+providersFile,
		"--inventory-sync-lease-duration=6s", "--inventory-sync-renew-deadline=4s", "--inventory-sync-retry-period=500ms",
		"--publish-clusterprofiles", "--publish-namespace="+ns, "--publish-gateway-selector="+label+"="+ns,
		"--publish-hub-server="+publishHub, "--publish-hub-ca-file="+caFile, "--publish-hub-ca-reload-interval=1s")
	// The last --kubeconfig given wins: each replica writes to the hub as itself.
	restartGateway(t, append(slices.Clone(args), "--kubeconfig="+kubeconfigA))
	t.Cleanup(func() { restartGateway(t, nil) })
	a := env.Gateway
	b, err := env.StartReplica(ctx, "cluster-gateway-pub-b", append(slices.Clone(args),
		"--kubeconfig="+kubeconfigB, "--authentication-kubeconfig="+kubeconfigB, "--authorization-kubeconfig="+kubeconfigB))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.StopReplica(b, 10*time.Second) })

	dc, err := dynamic.NewForConfig(env.Hub.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	profiles := dc.Resource(inventory.ClusterProfileResource).Namespace(ns)
	gc := gatewayClient(t, env.Hub.Kubeconfig).GatewayV1alpha1().ClusterGateways()

	// The fleet: a published gateway (its own profile) and a gateway synced
	// from a profile that also has another provider's entry, published.
	gA := uniqueName(t, "pubha-a")
	gw := directGateway(gA, 0)
	gw.Labels = map[string]string{label: ns}
	// Deleted at the end as a Secret: the replica the hub routes to may be the one killed.
	if _, err := gc.Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cleanupGateway(t, gA)
	other := map[string]any{"name": "other", "cluster": map[string]any{"server": "https://127.0.0.250:1"}}
	syncedProfile(t, profiles, "p1", e2eProvider, other)
	synced := inventory.GatewayName(ns, "p1")
	cleanupGateway(t, synced)
	eventually(t, "the sync makes "+synced, func() error {
		g, err := gc.Get(ctx, synced, metav1.GetOptions{})
		if err != nil {
			return err
		}
		g.Labels[label] = ns
		_, err = gc.Update(ctx, g, metav1.UpdateOptions{})
		return err
	})
	eventually(t, "both published: "+gA+" healthy with its version, p1 with the entry of "+synced, func() error {
		p, err := profiles.Get(ctx, gA, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c := conditionOf(p, publish.ConditionHealthy); c["status"] != "True" {
			return fmt.Errorf("%s: condition %v", gA, c)
		}
		if v, _, _ := unstructured.NestedString(p.Object, "status", "version", "kubernetes"); v == "" {
			return fmt.Errorf("%s: no version yet", gA)
		}
		if p, err = profiles.Get(ctx, "p1", metav1.GetOptions{}); err != nil {
			return err
		}
		if entryOf(p, "cluster-gateway") == nil || !jsonEqual(entryOf(p, "other"), other) {
			return fmt.Errorf("p1: entries %v", p.Object["status"])
		}
		return nil
	})
	const lease = "cluster-gateway-inventory-sync"
	writers, leader := holderChecked(t, auditWrites(t, auditLog), ns, lease)
	if leader == "" || len(writers) != 1 || writers[0] != leader {
		t.Fatalf("ClusterProfile writers %q, Lease holder %q: want the holder alone", writers, leader)
	}
	t.Logf("%s holds the Lease and wrote the profiles", leader)

	t.Run("an unchanged fleet causes no ClusterProfile write in 60 s, with both replicas running", func(t *testing.T) {
		versions := func() map[string]string {
			t.Helper()
			l, err := profiles.List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			m := map[string]string{}
			for _, p := range l.Items {
				m[p.GetName()] = p.GetResourceVersion()
			}
			return m
		}
		before, from := versions(), len(auditWrites(t, auditLog))
		time.Sleep(60 * time.Second)
		after, events := versions(), auditWrites(t, auditLog)[from:]
		if fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("ClusterProfiles in %s (name: resourceVersion) %v after 60 s, were %v: want no write", ns, after, before)
		}
		renewals := 0
		for _, e := range events {
			switch r := e.ObjectRef; {
			case r.Resource == "clusterprofiles" && r.Namespace == ns:
				t.Errorf("a ClusterProfile write during the 60 s: %v", e)
			case r.Resource == "leases" && r.Name == lease && e.ResponseStatus.Code < 300:
				renewals++
				if e.User.Username != leader {
					t.Errorf("%v: the Lease changed hands during the 60 s", e)
				}
			}
		}
		if renewals == 0 {
			t.Errorf("no Lease renewal in 60 s: the leader was not running, and the window proves nothing")
		}
		if a.Process == nil || a.Process.Exited() || b.Process == nil || b.Process.Exited() {
			t.Fatal("a replica exited during the 60 s")
		}
	})

	t.Run("the leader killed, the other replica takes the Lease and publishes", func(t *testing.T) {
		leaderGW, survivor, survivorUser := a, b, userB
		if leader == userB {
			leaderGW, survivor, survivorUser = b, a, userA
		} else if leader != userA {
			t.Fatalf("the Lease holder %q is neither replica", leader)
		}
		from := len(auditWrites(t, auditLog))
		if err := leaderGW.Process.Kill(); err != nil { // SIGKILL to its pid: it releases nothing
			t.Fatal(err)
		}
		// The hub may route to the killed replica: write through the survivor.
		sc := replicaClient(t, survivor).GatewayV1alpha1().ClusterGateways()
		gN := uniqueName(t, "pubha-new")
		nw := directGateway(gN, 0)
		nw.Labels = map[string]string{label: ns}
		if _, err := sc.Create(ctx, nw, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cleanupGateway(t, gN)
		// A profile editor (a user who may edit ClusterProfiles and nothing
		// else) changes the cluster-manager label of the owned profile.
		editor := "e2e-profile-editor-" + ns
		if _, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "profile-editor"}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"multicluster.x-k8s.io"}, Resources: []string{"clusterprofiles"}, Verbs: []string{"get", "update", "patch"}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "profile-editor"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "profile-editor"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: editor}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		ecfg := rest.CopyConfig(env.Hub.RESTConfig())
		ecfg.Impersonate = rest.ImpersonationConfig{UserName: editor}
		edc, err := dynamic.NewForConfig(ecfg)
		if err != nil {
			t.Fatal(err)
		}
		eprofiles := edc.Resource(inventory.ClusterProfileResource).Namespace(ns)
		eventually(t, "the editor's label change on "+gA, func() error {
			p, err := eprofiles.Get(ctx, gA, metav1.GetOptions{})
			if err != nil {
				return err
			}
			p.SetLabels(map[string]string{publish.LabelClusterManager: "someone-else", "team": "a"})
			_, err = eprofiles.Update(ctx, p, metav1.UpdateOptions{})
			return err
		})
		// spec.clusterManager cannot be changed by anyone: the CRD makes it
		// immutable (pkg/publish's unit test covers a hub without that rule).
		p, err := eprofiles.Get(ctx, gA, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_ = unstructured.SetNestedField(p.Object, "someone-else", "spec", "clusterManager", "name")
		if _, err := eprofiles.Update(ctx, p, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
			t.Errorf("changing spec.clusterManager: %v, want the CRD's 422 (immutable)", err)
		}

		eventually(t, "the survivor publishes "+gN+" and puts back the label of "+gA, func() error {
			p, err := profiles.Get(ctx, gN, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if e := entryOf(p, "cluster-gateway"); e == nil {
				return fmt.Errorf("%s: no entry yet", gN)
			}
			if p, err = profiles.Get(ctx, gA, metav1.GetOptions{}); err != nil {
				return err
			}
			if l := p.GetLabels(); l[publish.LabelClusterManager] != publish.ClusterManagerName || l["team"] != "a" {
				return fmt.Errorf("%s: labels %v, want %s=%s put back and team=a kept", gA, l, publish.LabelClusterManager, publish.ClusterManagerName)
			}
			return nil
		})
		all := auditWrites(t, auditLog)
		holderChecked(t, all, ns, lease) // the whole run, the takeover included
		writers, holder := holderChecked(t, all[from:], ns, lease)
		if holder != survivorUser || !slices.Equal(writers, []string{survivorUser}) {
			t.Errorf("after the kill: Lease holder %q, ClusterProfile writers %q; want %s alone", holder, writers, survivorUser)
		}
		var restored bool
		for _, e := range all[from:] {
			if r := e.ObjectRef; r.Resource == "clusterprofiles" && r.Name == gA && r.Subresource == "" && e.Verb == "patch" && e.User.Username == survivorUser {
				restored = true
			}
		}
		if !restored {
			t.Errorf("no patch of %s's metadata by %s in the audit log: who put the label back?", gA, survivorUser)
		}
	})

	t.Run("a changed hub CA file is published into the entries without a restart", func(t *testing.T) {
		// A bundle of the hub's CA and the next one, as during a CA rotation.
		bundle := append(append([]byte{}, env.Hub.CA.CertPEM...), testpki.MustCA(t, "next-hub-ca").CertPEM...)
		writeFile(t, caFile, string(bundle))
		want := base64.StdEncoding.EncodeToString(bundle)
		eventually(t, "the new CA in the entries of "+gA+" and p1", func() error {
			for _, n := range []string{gA, "p1"} {
				p, err := profiles.Get(ctx, n, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if ca, _, _ := unstructured.NestedString(entryOf(p, "cluster-gateway"), "cluster", "certificate-authority-data"); ca != want {
					return fmt.Errorf("%s: the entry's CA is not the new bundle yet", n)
				}
			}
			return nil
		})
	})
}
