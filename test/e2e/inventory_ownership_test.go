package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	gatewayclient "github.com/clustergateway/cluster-gateway/pkg/generated/clientset/versioned/typed/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/inventory"
)

// forgedMarks is the part of TestInventorySync that plays a writer who may
// patch ClusterGateways but not read Secrets, against the sync: she puts the
// sync's marks on an admin's gateway whose name a Cluster API Secret's
// gateway would have (that Secret holds a system:masters kubeconfig), and on
// one named for a Secret that does not exist.
type forgedMarks struct {
	ns     string
	admin  kubernetes.Interface
	rc     gatewayclient.ClusterGatewayInterface // reads from replica reader
	reader *localenv.Gateway                     // outlives the leader
	leader func() *localenv.Gateway

	victim, ghost   string    // the admin's gateways
	victimUID       types.UID // as created
	ghostUID        types.UID
	victimRV        string // after the marks were forged
	sourceAdminUser string // whom the Secret's kubeconfig authenticates
}

// newForgedMarks creates the admin's two gateways. TestInventorySync
// deletes them (cleanupGateway) once the gateway runs without the sync: the
// hub's APIService may point at the leader it kills.
func newForgedMarks(t *testing.T, f *forgedMarks) *forgedMarks {
	t.Helper()
	f.victim, f.ghost = inventory.GatewayName(f.ns, "victim"), inventory.GatewayName(f.ns, "ghost")
	c := gatewayClient(t, env.Hub.Kubeconfig).GatewayV1alpha1().ClusterGateways()
	for _, n := range []string{f.victim, f.ghost} {
		// As user "gateway", impersonating no one.
		if _, err := c.Create(context.Background(), directGateway(n, 0), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create ClusterGateway %s: %v", n, err)
		}
	}
	return f
}

// forgeAndSync: every API write of the marks is refused (422 naming the
// key); marks stored as an earlier version let them through do not make the
// sync rewrite the gateway (it counts a collision instead) nor delete the
// one whose source is missing, and the managed cluster sees the gateway's
// own identity, never the Secret's.
func (f *forgedMarks) forgeAndSync(t *testing.T) {
	ctx := context.Background()
	mallory := newHubUser(t, "mallory")
	role := uniqueName(t, "gateway-patcher")
	bind(t, "clusterrole", role, "--verb=get,list,watch,create,update,patch", "--resource=clustergateways.gateway.clustergateway.io")
	bind(t, "clusterrolebinding", role, "--clusterrole="+role, "--user="+mallory.Name)
	if r := kubectl(t, mallory.Kubeconfig, nil, "", "auth", "can-i", "get", "secrets", "-n", f.ns); strings.TrimSpace(r.Stdout) != "no" {
		t.Fatalf("mallory may read Secrets in %s (%q): the test would prove nothing", f.ns, r.Stdout)
	}

	for _, tc := range []struct{ gateway, object string }{{f.victim, f.ns + "/victim-kubeconfig"}, {f.ghost, f.ns + "/ghost-kubeconfig"}} {
		marks := fmt.Sprintf(`{"metadata":{"labels":{%q:"capi"},"annotations":{%q:%q}}}`, inventory.LabelSyncedFrom, inventory.AnnotationSource, tc.object)
		gw := getGateway(t, tc.gateway)
		gw.Labels = map[string]string{inventory.LabelSyncedFrom: "capi"}
		gw.Annotations = map[string]string{inventory.AnnotationSource: tc.object}
		gw.ManagedFields = nil
		gw.APIVersion, gw.Kind = gatewayv1alpha1.SchemeGroupVersion.String(), "ClusterGateway"
		replaced, err := json.Marshal(gw)
		if err != nil {
			t.Fatal(err)
		}
		applied := fmt.Sprintf(`{"apiVersion":"gateway.clustergateway.io/v1alpha1","kind":"ClusterGateway","metadata":{"name":%q,"labels":{%q:"capi"},"annotations":{%q:%q}}}`,
			tc.gateway, inventory.LabelSyncedFrom, inventory.AnnotationSource, tc.object)
		for _, w := range []struct {
			how, stdin string
			args       []string
		}{
			{"kubectl label", "", []string{"label", "clustergateway", tc.gateway, inventory.LabelSyncedFrom + "=capi"}},
			{"kubectl annotate", "", []string{"annotate", "clustergateway", tc.gateway, inventory.AnnotationSource + "=" + tc.object}},
			{"a merge patch", "", []string{"patch", "clustergateway", tc.gateway, "--type=merge", "-p", marks}},
			{"a JSON patch", "", []string{"patch", "clustergateway", tc.gateway, "--type=json", "-p",
				`[{"op":"add","path":"/metadata/labels","value":{"` + inventory.LabelSyncedFrom + `":"capi"}}]`}},
			{"a server-side apply", applied, []string{"apply", "--server-side", "--force-conflicts", "--field-manager=mallory", "-f", "-"}},
			{"kubectl replace", string(replaced), []string{"replace", "-f", "-"}},
		} {
			r := kubectl(t, mallory.Kubeconfig, nil, w.stdin, w.args...)
			if r.Err == nil || !strings.Contains(r.Stderr, "is invalid") || !strings.Contains(r.Stderr, inventory.LabelSyncedFrom) && !strings.Contains(r.Stderr, inventory.AnnotationSource) ||
				!strings.Contains(r.Stderr, "inventory sync") {
				t.Errorf("mallory writes the sync's marks on %s by %s: err=%v stderr=%s; want 422 naming the key", tc.gateway, w.how, r.Err, r.Stderr)
			}
		}
		if now := getGateway(t, tc.gateway); len(now.Labels)+len(now.Annotations) != 0 {
			t.Fatalf("%s has labels %v, annotations %v after refused writes", tc.gateway, now.Labels, now.Annotations)
		}
		// The marks as a version that let them through stored them.
		f.storeMarks(t, tc.gateway, tc.object)
	}
	f.victimUID, f.ghostUID = getGateway(t, f.victim).UID, getGateway(t, f.ghost).UID
	f.victimRV = getGateway(t, f.victim).ResourceVersion

	// The Secret whose gateway would have the victim's name: a
	// system:masters kubeconfig of the same cluster, for another user.
	m := env.Managed[0]
	f.sourceAdminUser = m.Name + "-admin"
	before := replicaMetrics(t, f.leader())[`cluster_gateway_inventory_collisions{source="capi"}`]
	secret := capiSecret("victim-kubeconfig", capiKubeconfig(t, m, m.CA.CertPEM, "", &gatewayv1alpha1.X509Credential{Certificate: m.Admin.CertPEM, PrivateKey: m.Admin.KeyPEM}))
	if _, err := f.admin.CoreV1().Secrets(f.ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The sync has seen the Secret once it counts the victim as a collision.
	eventually(t, "the leader to count the victim as a collision", func() error {
		if got := replicaMetrics(t, f.leader())[`cluster_gateway_inventory_collisions{source="capi"}`]; got != before+1 {
			return fmt.Errorf("collisions{capi} = %v, want %v", got, before+1)
		}
		return nil
	})
	f.untouched(t)
}

// untouchedAfterLeaderChange is untouched once the first leader was
// killed: the hub's APIService may point at it, so requests go to the
// surviving replica's port directly.
func (f *forgedMarks) untouchedAfterLeaderChange(t *testing.T) {
	f.check(t, func(gateway string) string {
		return kubeconfigFile(t, "", f.reader.URL+"/apis/gateway.clustergateway.io/v1alpha1/clustergateways/"+gateway+"/proxy", f.reader.CA.CertPEM,
			&clientcmdapi.AuthInfo{ClientCertificateData: env.Hub.Admin.CertPEM, ClientKeyData: env.Hub.Admin.KeyPEM})
	})
}

// storeMarks writes the sync's marks for object into gateway name's Secret
// data directly, as the hub's admin: what an API write stored before such
// writes were refused, and what earlier versions of the sync stored.
func (f *forgedMarks) storeMarks(t *testing.T, name, object string) {
	t.Helper()
	secrets := f.admin.CoreV1().Secrets(secretNamespace)
	s, err := secrets.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Data["labels"] = []byte(`{"` + inventory.LabelSyncedFrom + `":"capi"}`)
	s.Data["annotations"] = []byte(`{"` + inventory.AnnotationSource + `":"` + object + `"}`)
	if _, err := secrets.Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the marks on "+name, func() error {
		if gw, err := f.rc.Get(context.Background(), name, metav1.GetOptions{}); err != nil || gw.Annotations[inventory.AnnotationSource] != object {
			return fmt.Errorf("%v", err)
		}
		return nil
	})
}

// untouched: both gateways are as the admin made them (with the marks), and
// the managed cluster sees the victim's own user through it.
func (f *forgedMarks) untouched(t *testing.T) {
	t.Helper()
	f.check(t, func(gateway string) string { return viaHubKubeconfig(t, gateway) })
}

func (f *forgedMarks) check(t *testing.T, proxyKubeconfig func(gateway string) string) {
	t.Helper()
	gw, err := f.rc.Get(context.Background(), f.victim, metav1.GetOptions{})
	if err != nil || gw.UID != f.victimUID || gw.ResourceVersion != f.victimRV || gw.Spec.Credential.Type != gatewayv1alpha1.CredentialX509Certificate ||
		gw.Spec.Endpoint.Address != env.Managed[0].URL {
		t.Errorf("the admin's gateway %s with forged marks: %v; want it unchanged (uid %s, resourceVersion %s, X509): got %+v", f.victim, err, f.victimUID, f.victimRV, gw)
	}
	if user := whoamiThrough(t, proxyKubeconfig(f.victim)); user != "gateway" {
		t.Errorf("the managed cluster saw %q through %s, want its own credential's user \"gateway\" (the Secret's is %q)", user, f.victim, f.sourceAdminUser)
	}
	if gw, err := f.rc.Get(context.Background(), f.ghost, metav1.GetOptions{}); err != nil || gw.UID != f.ghostUID {
		t.Errorf("the admin's gateway %s with the marks of a missing source: %v; want it kept", f.ghost, err)
	}
}
