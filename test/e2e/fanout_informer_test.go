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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// fanoutInformerIPs are where TestFanoutInformer runs a kube-apiserver of
// managed clusters 0 and 1 without a watch cache.
var fanoutInformerIPs = [2]string{"127.0.0.161", "127.0.0.162"}

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

// TestFanoutInformer: client-go reflectors with client-go's defaults
// (watch-list on), each built from the kubeconfig `kubectl cgw kubeconfig
// -l` writes for a set of two clusters, with the store key docs/api.md
// gives, mirror ConfigMaps of managed clusters 0 and 1, including one name
// on both: each reflector's watch-list is refused (422) and it lists
// instead (a watch-list would gather the initial events by namespace/name,
// making the two objects of one name one); adds, updates and deletes on
// each cluster arrive, and each store equals what the clusters hold. Through a set of two
// kube-apiservers without a watch cache (which send no bookmarks of their
// own), watches cut every few seconds resume from the set's last bookmark
// without a relist. Through a set of one such kube-apiserver and managed
// cluster 1 itself, the shared etcd is compacted past where the uncached
// cluster's watch would resume: that resume is a real 410, the reflector
// lists again, and its store still equals the truth, with changes made
// meanwhile.
func TestFanoutInformer(t *testing.T) {
	requireGateway(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Without a watch cache a watch resumes from etcd, so compacting etcd
	// makes an old resourceVersion too old at once (a watch cache would
	// serve it from its own window); and it sends no bookmarks of its own
	// (a watch cache sends one before a watch's timeout), so that only the
	// set's last bookmark can spare the reflector a relist when a watch
	// ends.
	var uncached [2]string
	for i, ip := range fanoutInformerIPs {
		replica, err := env.StartAPIServerReplica(ctx, env.Managed[i], ip, "--watch-cache=false")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := env.StopCluster(replica); err != nil {
				t.Errorf("stopping %s: %v", replica.Name, err)
			}
		})
		uncached[i] = replica.URL
	}
	label := uniqueName(t, "fo-inf")
	sel := "fo-informer=" + label
	bookmarks := newSetMirror(ctx, t, sel, uncached[0], uncached[1])
	compacted := newSetMirror(ctx, t, sel, uncached[0], env.Managed[1].URL)
	mirrors := []*setMirror{bookmarks, compacted}

	// The clusters, written directly.
	clusters := [2]kubernetes.Interface{managedClient(t, 0), managedClient(t, 1)}
	write := func(i int, name, v string) {
		t.Helper()
		c := clusters[i].CoreV1().ConfigMaps("default")
		cm, err := c.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			_, err = c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"fo-informer": label}}, Data: map[string]string{"v": v}}, metav1.CreateOptions{})
		} else {
			cm.Data = map[string]string{"v": v}
			_, err = c.Update(ctx, cm, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatalf("write %s on cluster %d: %v", name, i, err)
		}
	}
	remove := func(i int, name string) {
		t.Helper()
		if err := clusters[i].CoreV1().ConfigMaps("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete %s on cluster %d: %v", name, i, err)
		}
	}
	t.Cleanup(func() {
		for _, c := range clusters {
			_ = c.CoreV1().ConfigMaps("default").DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel})
		}
	})
	// mirrored waits until each running mirror's store holds what the
	// clusters hold: key (its gateways' names) -> data and resourceVersion.
	mirrored := func(what string, ms ...*setMirror) {
		t.Helper()
		eventually(t, what, func() error {
			var held [2][]corev1.ConfigMap
			for i, c := range clusters {
				l, err := c.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{LabelSelector: sel})
				if err != nil {
					return err
				}
				held[i] = l.Items
			}
			for _, m := range ms {
				want := map[string]string{}
				for i := range held {
					for _, cm := range held[i] {
						want[m.gateways[i]+"/default/"+cm.Name] = cm.Data["v"] + "@" + cm.ResourceVersion
					}
				}
				got := map[string]string{}
				for _, o := range m.store.List() {
					cm := o.(*corev1.ConfigMap)
					k, _ := setKey(cm)
					got[k] = cm.Data["v"] + "@" + cm.ResourceVersion
				}
				if !maps.Equal(got, want) {
					return fmt.Errorf("store %v\nclusters %v", got, want)
				}
			}
			return nil
		})
	}

	// One name on both clusters, and one of a's own.
	write(0, "same", "a0")
	write(1, "same", "b0")
	write(0, "only-a", "a0")
	mirrored("the initial list: one name on two clusters is two entries", mirrors...)
	for _, m := range mirrors {
		if n := len(m.store.ListKeys()); n != 3 {
			t.Fatalf("store keys %v, want 3", m.store.ListKeys())
		}
		if n := m.watchLists.Load(); n == 0 || m.lists.Load() == 0 {
			t.Errorf("%d watch-lists and %d lists, want the reflector's default: a watch-list first, refused, then a list", n, m.lists.Load())
		}
		var err error
		if p := m.watchListErr.Load(); p != nil {
			err = *p
		}
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "watch from the list's resourceVersion") {
			t.Errorf("the set's answer to a watch-list: %v, want 422 Invalid saying to list, then watch from the list's resourceVersion", err)
		}
	}

	t.Run("adds, updates and deletes on each cluster arrive", func(t *testing.T) {
		write(0, "added", "a1")
		write(1, "added", "b1")
		mirrored("adds", mirrors...)
		write(0, "same", "a2")
		write(1, "same", "b2")
		mirrored("updates of one name on two clusters", mirrors...)
		remove(0, "added")
		mirrored("a delete on one cluster leaves the other's object of that name", mirrors...)
		remove(1, "added")
		write(1, "only-b", "b3")
		mirrored("deletes", mirrors...)
	})

	t.Run("watches resume from the set's bookmark without a relist", func(t *testing.T) {
		m := bookmarks
		l0, w0 := m.lists.Load(), m.watches.Load()
		// A change, so that the last event of the watch is an object of
		// one cluster: the set's last bookmark, not that object's
		// resourceVersion, must be where the reflector resumes.
		write(1, "only-b", "b4")
		mirrored("a change before the watch ends", m)
		eventually(t, "three watches more", func() error {
			if n := m.watches.Load(); n < w0+3 {
				return fmt.Errorf("%d watches, want %d", n, w0+3)
			}
			return nil
		})
		if l := m.lists.Load(); l != l0 {
			t.Errorf("%d lists during %d watches, want none: a watch that ends must resume from the set's last bookmark", l-l0, m.watches.Load()-w0)
		}
		mirrored("after the watches resumed", m)
	})
	// Compacting etcd would make both of its clusters' places too old.
	bookmarks.stop()

	t.Run("a real 410: the reflector lists again and converges", func(t *testing.T) {
		m := compacted
		l0 := m.lists.Load()
		// Changes on cluster 0, then etcd compacted past them (two writes
		// past the last, so that its uncached kube-apiserver's next watch
		// starts below the compacted revision). Nothing is written on
		// cluster 0 again until the relist, so no event can move its place
		// past the compaction first.
		write(0, "only-a", "a5")
		write(0, "only-a", "a6")
		write(1, "only-b", "b6")
		write(1, "only-b", "b7")
		compactEtcd(t)
		write(1, "meanwhile", "b8")
		eventually(t, "a relist", func() error {
			if n := m.lists.Load(); n == l0 {
				return fmt.Errorf("no list since the compaction (%d watches)", m.watches.Load())
			}
			return nil
		})
		write(0, "after-relist", "a9")
		write(1, "only-b", "b9")
		mirrored("after the relist", m)
	})
}

// setMirror is a reflector through a set of two new ClusterGateways (the
// addresses of managed clusters 0 and 1 given) into a store keyed by
// cluster, with the ConfigMaps of default that sel selects. It counts the
// reflector's lists, watch-lists (sendInitialEvents) and watches, and cuts
// each watch short (timeoutSeconds), so that the test sees the reflector
// resume many times.
type setMirror struct {
	gateways                   [2]string
	store                      cache.Store
	lists, watchLists, watches atomic.Int32
	watchListErr               atomic.Pointer[error] // the set's answer to the last refused watch-list
	stop                       func()
}

func newSetMirror(ctx context.Context, t *testing.T, sel string, addresses ...string) *setMirror {
	t.Helper()
	m := &setMirror{store: cache.NewStore(setKey)}
	label := uniqueName(t, "fo-set")
	for i, addr := range addresses {
		gw := directGateway(uniqueName(t, fmt.Sprintf("fo-inf-%d", i)), i)
		gw.Spec.Endpoint.Address = addr
		gw.Labels = map[string]string{"fleet": label}
		createGateway(t, gw)
		m.gateways[i] = gw.Name
	}
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
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			m.lists.Add(1)
			o.LabelSelector = sel
			return set.CoreV1().ConfigMaps("default").List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			if o.SendInitialEvents != nil && *o.SendInitialEvents {
				m.watchLists.Add(1)
				w, err := set.CoreV1().ConfigMaps("default").Watch(ctx, o)
				if err != nil {
					m.watchListErr.Store(&err)
				}
				return w, err
			}
			m.watches.Add(1)
			short := int64(4)
			o.TimeoutSeconds = &short
			return set.CoreV1().ConfigMaps("default").Watch(ctx, o)
		},
	}
	r := cache.NewReflectorWithOptions(lw, &corev1.ConfigMap{}, m.store, cache.ReflectorOptions{Name: "fanout-informer-" + label})
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.RunWithContext(ctx) }()
	m.stop = func() { cancel(); <-done }
	t.Cleanup(m.stop)
	return m
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
