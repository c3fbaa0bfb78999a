package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// fanoutInformerIP is where TestFanoutInformer runs a kube-apiserver of
// managed cluster 0 without a watch cache.
const fanoutInformerIP = "127.0.0.161"

const setClusterAnnotation = "gateway.clustergateway.io/cluster"

// setKey is the store key docs/api.md gives for a cache read through a set:
// the cluster annotation, then namespace/name.
func setKey(obj any) (string, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return d.Key, nil
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", err
	}
	return m.GetAnnotations()[setClusterAnnotation] + "/" + m.GetNamespace() + "/" + m.GetName(), nil
}

// setListWatch counts the reflector's lists and watches, and cuts each
// watch short (timeoutSeconds), so that the test sees the reflector resume
// many times. It turns client-go's watch-list off: its reflector collects
// the initial events in a store keyed by namespace/name
// (tools/cache/reflector.go, temporaryStore), whatever the store's key, so
// two clusters' objects of one name would collapse there (docs/api.md).
type setListWatch struct {
	*cache.ListWatch
}

func (setListWatch) IsWatchListSemanticsUnSupported() bool { return true }

// TestFanoutInformer: a client-go reflector, built from the kubeconfig
// `kubectl cgw kubeconfig -l` writes, with the store key docs/api.md gives,
// mirrors ConfigMaps of two clusters (one of them a kube-apiserver of
// managed cluster 0 without a watch cache, the other managed cluster 1),
// including one name on both: adds, updates and deletes on each arrive,
// and the store equals what the clusters hold. Its watches, cut every few
// seconds, resume from the set's last bookmark without a relist. Then the
// shared etcd is compacted past where the uncached cluster's watch would
// resume: that resume is a real 410, the reflector lists again, and the
// store still equals the truth, with changes made meanwhile.
func TestFanoutInformer(t *testing.T) {
	requireGateway(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Without a watch cache a watch resumes from etcd, so compacting etcd
	// makes an old resourceVersion too old at once (a watch cache would
	// serve it from its own window).
	replica, err := env.StartAPIServerReplica(ctx, env.Managed[0], fanoutInformerIP, "--watch-cache=false")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.StopCluster(replica); err != nil {
			t.Errorf("stopping %s: %v", replica.Name, err)
		}
	})

	label := uniqueName(t, "fo-inf")
	a, b := uniqueName(t, "fo-inf-a"), uniqueName(t, "fo-inf-b")
	gwA := directGateway(a, 0)
	gwA.Spec.Endpoint.Address = replica.URL
	gwB := directGateway(b, 1)
	gwA.Labels = map[string]string{"fleet": label}
	gwB.Labels = map[string]string{"fleet": label}
	createGateway(t, gwA)
	createGateway(t, gwB)
	kc := filepath.Join(t.TempDir(), "set.kubeconfig")
	mustCgw(t, env.Hub.Kubeconfig, "kubeconfig", "-l", "fleet="+label, "-o", kc)
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	set, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	// The clusters, each as its ClusterGateway names it, written directly.
	clusters := map[string]kubernetes.Interface{a: managedClient(t, 0), b: managedClient(t, 1)}
	sel := "fo-informer=" + label
	write := func(cluster, name, v string) {
		t.Helper()
		c := clusters[cluster].CoreV1().ConfigMaps("default")
		cm, err := c.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			_, err = c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"fo-informer": label}}, Data: map[string]string{"v": v}}, metav1.CreateOptions{})
		} else {
			cm.Data = map[string]string{"v": v}
			_, err = c.Update(ctx, cm, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatalf("write %s on %s: %v", name, cluster, err)
		}
	}
	remove := func(cluster, name string) {
		t.Helper()
		if err := clusters[cluster].CoreV1().ConfigMaps("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete %s on %s: %v", name, cluster, err)
		}
	}
	t.Cleanup(func() {
		for _, c := range clusters {
			_ = c.CoreV1().ConfigMaps("default").DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel})
		}
	})
	// truth is what the clusters hold: key -> data and resourceVersion.
	truth := func() (map[string]string, error) {
		out := map[string]string{}
		for name, c := range clusters {
			l, err := c.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{LabelSelector: sel})
			if err != nil {
				return nil, err
			}
			for _, cm := range l.Items {
				out[name+"/default/"+cm.Name] = cm.Data["v"] + "@" + cm.ResourceVersion
			}
		}
		return out, nil
	}

	var lists, watches atomic.Int32
	lw := setListWatch{&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			lists.Add(1)
			o.LabelSelector = sel
			return set.CoreV1().ConfigMaps("default").List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			watches.Add(1)
			o.LabelSelector = sel
			short := int64(4)
			o.TimeoutSeconds = &short
			return set.CoreV1().ConfigMaps("default").Watch(ctx, o)
		},
	}}
	store := cache.NewStore(setKey)
	r := cache.NewReflectorWithOptions(lw, &corev1.ConfigMap{}, store, cache.ReflectorOptions{Name: "fanout-informer"})
	done := make(chan struct{})
	go func() { defer close(done); r.RunWithContext(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	// mirrored waits until the store holds what the clusters hold.
	mirrored := func(what string) {
		t.Helper()
		eventually(t, what, func() error {
			want, err := truth()
			if err != nil {
				return err
			}
			got := map[string]string{}
			for _, o := range store.List() {
				cm := o.(*corev1.ConfigMap)
				k, _ := setKey(cm)
				got[k] = cm.Data["v"] + "@" + cm.ResourceVersion
			}
			if !maps.Equal(got, want) {
				return fmt.Errorf("store %v\nclusters %v", got, want)
			}
			return nil
		})
	}

	// One name on both clusters, and one of each's own.
	write(a, "same", "a0")
	write(b, "same", "b0")
	write(a, "only-a", "a0")
	mirrored("the initial list: one name on two clusters is two entries")
	if n := len(store.ListKeys()); n != 3 {
		t.Fatalf("store keys %v, want 3", store.ListKeys())
	}

	t.Run("adds, updates and deletes on each cluster arrive", func(t *testing.T) {
		write(a, "added", "a1")
		write(b, "added", "b1")
		mirrored("adds")
		write(a, "same", "a2")
		write(b, "same", "b2")
		mirrored("updates of one name on two clusters")
		remove(a, "added")
		mirrored("a delete on one cluster leaves the other's object of that name")
		remove(b, "added")
		write(b, "only-b", "b3")
		mirrored("deletes")
	})

	t.Run("watches resume from the set's bookmark without a relist", func(t *testing.T) {
		l0, w0 := lists.Load(), watches.Load()
		// A change, so that the last event of the watch is an object of
		// one cluster: the watch's last bookmark, not that object's
		// resourceVersion, must be where the reflector resumes.
		write(b, "only-b", "b4")
		mirrored("a change before the watch ends")
		eventually(t, "three watches more", func() error {
			if n := watches.Load(); n < w0+3 {
				return fmt.Errorf("%d watches, want %d", n, w0+3)
			}
			return nil
		})
		if l := lists.Load(); l != l0 {
			t.Errorf("%d lists during %d watches, want none: a watch that ends must resume from the set's last bookmark", l-l0, watches.Load()-w0)
		}
		mirrored("after the watches resumed")
	})

	t.Run("a real 410: the reflector lists again and converges", func(t *testing.T) {
		l0 := lists.Load()
		// Changes on a, then etcd compacted past them (two writes past
		// the last, so that a's next resumed watch starts below the
		// compacted revision): a's watch resumes from a6 at the latest.
		// Nothing is written on a again until the relist, so no event can
		// move a's place past the compaction first.
		write(a, "only-a", "a5")
		write(a, "only-a", "a6")
		write(b, "only-b", "b6")
		write(b, "only-b", "b7")
		compactEtcd(t)
		write(b, "meanwhile", "b8")
		eventually(t, "a relist", func() error {
			if n := lists.Load(); n == l0 {
				return fmt.Errorf("no list since the compaction (%d watches)", watches.Load())
			}
			return nil
		})
		write(a, "after-relist", "a9")
		write(b, "only-b", "b9")
		mirrored("after the relist")
	})
}

// compactEtcd compacts the suite's etcd at its present revision, through
// etcd's JSON gateway (as a kube-apiserver does every
// --etcd-compaction-interval, which is 5 minutes).
func compactEtcd(t *testing.T) {
	t.Helper()
	post := func(path string, body any) []byte {
		t.Helper()
		b, _ := json.Marshal(body)
		resp, err := http.Post(env.EtcdURL+path, "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatalf("etcd %s: %v", path, err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("etcd %s: %s %s", path, resp.Status, out)
		}
		return out
	}
	var r struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	if err := json.Unmarshal(post("/v3/kv/range", map[string]string{"key": "AA=="}), &r); err != nil || r.Header.Revision == "" {
		t.Fatalf("etcd revision: %v %+v", err, r)
	}
	post("/v3/kv/compaction", map[string]any{"revision": r.Header.Revision, "physical": true})
	t.Logf("etcd compacted at revision %s", r.Header.Revision)
}

// TestFanoutAudit restarts the gateway with an audit policy that records
// clustersets/proxy at Metadata, lists through a set of two clusters (one
// gateway with impersonation None, one in Caller mode) and checks the set's
// event in the gateway's audit log: the clusters read, their count, and each
// cluster's identity as the single-cluster path records it, and none of the
// single-cluster proxy.* annotations (each cluster's read has an event of
// its own, not written). It restarts the gateway, so it is not parallel.
func TestFanoutAudit(t *testing.T) {
	requireGateway(t)
	policy := filepath.Join(t.TempDir(), "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    resources:
      - group: gateway.clustergateway.io
        resources: ["clustersets/proxy"]
  - level: None
`), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(env.StateDir, "logs", "audit-"+uniqueName(t, "fanout")+".log")
	restartGateway(t, append(append([]string{}, env.GatewayArgs...), "--audit-policy-file="+policy, "--audit-log-path="+logPath))
	t.Cleanup(func() { restartGateway(t, nil) })

	label := uniqueName(t, "fo-audit")
	a, b := directGateway(uniqueName(t, "fo-audit-a"), 0), directGateway(uniqueName(t, "fo-audit-b"), 1)
	b.Spec.Impersonation.Mode = gatewayv1alpha1.ImpersonationCaller
	for _, gw := range []*gatewayv1alpha1.ClusterGateway{a, b} {
		gw.Labels = map[string]string{"fleet": label}
		createGateway(t, gw)
	}
	kc := filepath.Join(t.TempDir(), "set.kubeconfig")
	mustCgw(t, env.Hub.Kubeconfig, "kubeconfig", "-l", "fleet="+label, "-o", kc)
	eventually(t, "a list through the set with both clusters", func() error {
		out := kubectl(t, kc, nil, "", "get", "ns", "default", "-o", "name")
		if out.Err != nil || strings.Count(out.Stdout, "namespace/default") != 2 {
			return fmt.Errorf("%v\n%s\n%s", out.Err, out.Stdout, out.Stderr)
		}
		return nil
	})

	clusters := []string{a.Name, b.Name}
	slices.Sort(clusters)
	subjectA := "x509:" + certSubject(t, env.Managed[0].GatewayUser.CertPEM)
	subjectB := "x509:" + certSubject(t, env.Managed[1].GatewayUser.CertPEM)
	want := map[string]string{
		"fanout.gateway.clustergateway.io/clusters":           strings.Join(clusters, ","),
		"fanout.gateway.clustergateway.io/cluster-count":      "2",
		"fanout.gateway.clustergateway.io/identity." + a.Name: fmt.Sprintf(`{"impersonation":"None","identity":%q,"authenticated-as":%q}`, subjectA, subjectA),
		"fanout.gateway.clustergateway.io/identity." + b.Name: fmt.Sprintf(`{"impersonation":"Caller","identity":%q,"authenticated-as":%q}`, adminName(), subjectB),
	}
	var ev auditEvent
	eventually(t, "the set's list in the audit log", func() error {
		events, err := readAuditLog(logPath)
		if err != nil {
			return err
		}
		for _, e := range events {
			if e.Stage == "ResponseComplete" && e.ObjectRef.Resource == "clustersets" && strings.Contains(e.RequestURI, "/api/v1/namespaces/default") &&
				e.Annotations["fanout.gateway.clustergateway.io/clusters"] == want["fanout.gateway.clustergateway.io/clusters"] &&
				len(e.Annotations) >= len(want) {
				ev = e
				return nil
			}
		}
		return fmt.Errorf("no ResponseComplete event of a get of namespace default through the set (%d events)", len(events))
	})
	got := map[string]string{}
	for k, v := range ev.Annotations {
		if strings.HasPrefix(k, "fanout.") || strings.HasPrefix(k, auditPrefix) {
			got[k] = v
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("the set's audit annotations\n got %v\nwant %v\n(event %s %s)", got, want, ev.Verb, ev.RequestURI)
	}
	raw, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	requireNoMaterial(t, "the audit log", string(raw), env.Managed[0].GatewayUser.KeyPEM, env.Managed[1].GatewayUser.KeyPEM)
}
