package gateways

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/clustergateway/cluster-gateway/internal/testpoll"
	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// A kubeconfig Secret is written by whoever may write Secrets in a source
// namespace: less trusted than the gateway. These tests hold its reading
// to bounds (docs/security.md, "Untrusted input has bounds").

// aliasBomb is a kubeconfig that is usable as far as client-go is
// concerned, plus an extension of 2000 aliases to one 200 KiB string:
// about 200 KiB that clientcmd.Load expands to over a GiB.
func aliasBomb(t *testing.T, c testCredential) []byte {
	var b strings.Builder
	b.Write(kubeconfigBytes(t, "https://10.0.0.7:6443", c.caPEM, "bomb-token", nil, nil))
	fmt.Fprintf(&b, "extensions:\n- name: a\n  extension: &a \"%s\"\n- name: b\n  extension: [", strings.Repeat("x", 200<<10))
	for i := range 2000 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("*a")
	}
	b.WriteString("]\n")
	return []byte(b.String())
}

// heapAllocated is how many bytes the process allocated while f ran
// (cumulative: it does not depend on when the GC ran).
func heapAllocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// sourceStore starts a store over secrets and one gateway per entry of
// refs (gateway name -> Secret name in sourceNamespace).
func sourceStore(t *testing.T, secrets []*corev1.Secret, refs map[string]string) (*Store, *fake.Clientset) {
	t.Helper()
	var objs []k8sruntime.Object
	for _, s := range secrets {
		objs = append(objs, s)
	}
	for gw, sec := range refs {
		s := mustToSecret(t, refGateway(gw, v1alpha1.SecretReference{Namespace: sourceNamespace, Name: sec}, ""), nil)
		s.ResourceVersion = "1"
		objs = append(objs, s)
	}
	client := fake.NewClientset(objs...)
	return NewStore(client, testNamespace, testNamespace, sourceNamespace), client
}

// A Secret whose kubeconfig is an alias bomb makes only its own gateway
// SourceMalformed, saying what to fix without quoting it, and reading it
// allocates a small multiple of its size; so does one over the byte cap.
// The gateway next to them, on a good Secret, stays Ready.
func TestKubeconfigAliasBombOnlyItsGateway(t *testing.T) {
	c := validCredential(t)
	bomb := aliasBomb(t, c)
	big := append(kubeconfigBytes(t, "https://10.0.0.8:6443", c.caPEM, "big-token", nil, nil),
		[]byte("extensions:\n- name: pad\n  extension: \""+strings.Repeat("y", kubeconfigLimits.MaxBytes)+"\"\n")...)
	store, _ := sourceStore(t, []*corev1.Secret{
		capiSecret("bomb-kubeconfig", "1", bomb),
		capiSecret("big-kubeconfig", "1", big),
		capiSecret("good-kubeconfig", "1", kubeconfigBytes(t, "https://10.0.0.9:6443", c.caPEM, "good-token", nil, nil)),
	}, map[string]string{"bomb": "bomb-kubeconfig", "big": "big-kubeconfig", "good": "good-kubeconfig"})
	startStore(t, store)

	var g *Gateway
	var err error
	// The documented cost of parsing (pkg/boundedyaml: at most 160 bytes
	// allocated per byte), plus what the store's own goroutines allocate
	// meanwhile; following the aliases costs over a GiB.
	if got, bound := heapAllocated(func() { g, err = store.Get("bomb") }), uint64(160*len(bomb)+16<<20); got > bound {
		t.Errorf("reading the %d KiB alias bomb allocated %d MiB, want at most %d MiB", len(bomb)>>10, got>>20, bound>>20)
	}
	if err != nil {
		t.Fatal(err)
	}
	if g.Ready || readyReason(g) != v1alpha1.ReasonSourceMalformed || !strings.Contains(g.Problem, "uses a YAML anchor or alias") || !strings.Contains(g.Problem, "write each value out in full") {
		t.Errorf("the alias bomb's gateway: Ready %v, reason %s, problem %q; want SourceMalformed saying to write each value out", g.Ready, readyReason(g), g.Problem)
	}
	if g, err = store.Get("big"); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("more than the %d KiB the gateway reads", kubeconfigLimits.MaxBytes>>10); g.Ready || readyReason(g) != v1alpha1.ReasonSourceMalformed || !strings.Contains(g.Problem, want) {
		t.Errorf("the oversized kubeconfig's gateway: Ready %v, reason %s, problem %q; want SourceMalformed saying %q", g.Ready, readyReason(g), g.Problem, want)
	}
	for _, name := range []string{"bomb", "big"} {
		g, _ := store.Get(name)
		if p := g.Problem; strings.Contains(p, "xxx") || strings.Contains(p, "yyy") || strings.Contains(p, "-token") || len(p) > 400 {
			t.Errorf("%s: the problem quotes the kubeconfig: %.300q", name, p)
		}
	}
	if g, err = store.Get("good"); err != nil || !g.Ready || g.Conn.Token != "good-token" {
		t.Errorf("the gateway on a good Secret next to them: %+v, %v; want Ready with its token", g, err)
	}
}

// kubeconfigWith is a Cluster API-style kubeconfig with extra lines in its
// user (indented under it).
func kubeconfigWith(user string) []byte {
	return []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://10.0.0.7:6443"}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
users:
- name: u
  user:
    token: kubeconfig-token
` + user)
}

// A kubeconfig whose user impersonates is refused: the gateway does not
// apply it, and ignoring it would act as the kubeconfig's own, more
// powerful identity.
func TestKubeconfigImpersonationRefused(t *testing.T) {
	cases := map[string]string{
		"as":            "    as: limited-user\n",
		"as-uid":        "    as-uid: \"1234\"\n",
		"as-groups":     "    as-groups: [limited]\n",
		"as-user-extra": "    as-user-extra: {scopes: [view]}\n",
	}
	var secrets []*corev1.Secret
	refs := map[string]string{"plain": "plain-kubeconfig"}
	secrets = append(secrets, capiSecret("plain-kubeconfig", "1", kubeconfigWith("")))
	for field, line := range cases {
		secrets = append(secrets, capiSecret(field+"-kubeconfig", "1", kubeconfigWith(line)))
		refs[field] = field + "-kubeconfig"
	}
	store, _ := sourceStore(t, secrets, refs)
	startStore(t, store)
	if g, err := store.Get("plain"); err != nil || !g.Ready {
		t.Fatalf("the same kubeconfig without impersonation: %+v, %v; want Ready", g, err)
	}
	for field := range cases {
		g, err := store.Get(field)
		if err != nil {
			t.Fatal(err)
		}
		if g.Ready || readyReason(g) != v1alpha1.ReasonSourceMalformed || !strings.Contains(g.Problem, "impersonates (as, as-uid, as-groups or as-user-extra)") ||
			!strings.Contains(g.Problem, "spec.impersonation.mode Caller") {
			t.Errorf("a kubeconfig with %s: Ready %v, reason %s, problem %q; want SourceMalformed naming the impersonation and what to do", field, g.Ready, readyReason(g), g.Problem)
		}
	}
}

// The kubeconfig fields the gateway ignores change neither whom the
// credential acts for nor where it goes; each is ignored on purpose
// (docs/security.md), and a kubeconfig with all of them is usable.
func TestKubeconfigIgnoredFields(t *testing.T) {
	raw := []byte(`apiVersion: v1
kind: Config
preferences: {colors: true}
extensions: [{name: top, extension: {a: b}}]
clusters:
- name: c
  cluster:
    server: "https://10.0.0.7:6443"
    disable-compression: true
    extensions: [{name: client.authentication.k8s.io/exec, extension: {region: eu}}]
contexts:
- name: x
  context: {cluster: c, user: u, namespace: team-a, extensions: [{name: ctx, extension: {}}]}
current-context: x
users:
- name: u
  user:
    token: kubeconfig-token
    extensions: [{name: user, extension: {}}]
`)
	store, _ := sourceStore(t, []*corev1.Secret{capiSecret("k-kubeconfig", "1", raw)}, map[string]string{"k": "k-kubeconfig"})
	startStore(t, store)
	g, err := store.Get("k")
	if err != nil || !g.Ready || g.Conn.Token != "kubeconfig-token" || g.Conn.Endpoint.Address != "https://10.0.0.7:6443" {
		t.Fatalf("a kubeconfig with only ignored extras: %+v, %v; want Ready with its server and token", g, err)
	}
}

// No problem a kubeconfig has quotes it: a credential is in it. client-go's
// own decoding quoted every user of a kubeconfig that names one twice,
// tokens and keys included, in its error.
func TestKubeconfigProblemsNeverQuoteIt(t *testing.T) {
	const tok1, tok2 = "first-s3cr3t-token", "second-s3cr3t-token"
	cases := map[string]struct{ raw, want string }{
		"user twice": {`apiVersion: v1
kind: Config
users: [{name: u, user: {token: ` + tok1 + `}}, {name: u, user: {token: ` + tok2 + `, client-key-data: c2VjcmV0LWtleQ==}}]
`, `names user "u" twice`},
		"cluster twice": {"clusters: [{name: c, cluster: {server: " + tok1 + "}}, {name: c, cluster: {server: " + tok2 + "}}]\n", `names cluster "c" twice`},
		"context twice": {"contexts: [{name: x, context: {user: " + tok1 + "}}, {name: x, context: {user: " + tok2 + "}}]\n", `names context "x" twice`},
		"key twice":     {"users: [{name: u, user: {token: " + tok1 + ", token: " + tok2 + "}}]\n", "appears twice"},
		"wrong type":    {"users: [{name: u, user: {token: [" + tok1 + "]}}]\n", "is not a kubeconfig"},
		"not base64":    {"users: [{name: u, user: {client-key-data: " + tok1 + "}}]\n", "is not a kubeconfig"},
		"tag":           {"users: [{name: u, user: {token: !!int " + tok1 + "}}]\n", "not the !!int"},
		"not yaml":      {"users: [{name: u, user: {token: \"" + tok1 + "}}]\n", "is not YAML"},
		"other kind":    {"apiVersion: v1\nkind: Secret\nstringData: {token: " + tok1 + "}\n", "is not a kubeconfig (apiVersion v1, kind Config)"},
	}
	var secrets []*corev1.Secret
	refs := map[string]string{}
	i := 0
	for name, tc := range cases {
		secrets = append(secrets, capiSecret(fmt.Sprintf("k%d", i), "1", []byte(tc.raw)))
		refs[strings.ReplaceAll(name, " ", "-")] = fmt.Sprintf("k%d", i)
		i++
	}
	store, _ := sourceStore(t, secrets, refs)
	startStore(t, store)
	for name, tc := range cases {
		g, err := store.Get(strings.ReplaceAll(name, " ", "-"))
		if err != nil {
			t.Fatal(err)
		}
		if g.Ready || readyReason(g) != v1alpha1.ReasonSourceMalformed || !strings.Contains(g.Problem, tc.want) {
			t.Errorf("%s: Ready %v, reason %s, problem %q; want SourceMalformed saying %q", name, g.Ready, readyReason(g), g.Problem, tc.want)
		}
		if strings.Contains(g.Problem, "s3cr3t") || strings.Contains(g.Problem, "c2VjcmV0") || strings.Contains(g.Problem, "[115 101") {
			t.Errorf("%s: the problem quotes the kubeconfig: %q", name, g.Problem)
		}
	}
}

// Each version of a Secret's material is parsed once, however many
// gateways name it and however many subscribers (the proxy, the prober,
// the inventory sync, ...) and requests resolve them at once; a write
// that changes only the Secret's metadata, or the same version handed over
// again (an informer's relist), parses nothing.
func TestSourceParsedOncePerVersion(t *testing.T) {
	c := validCredential(t)
	const gateways, subscribers = 3, 8
	// A kubeconfig that takes a while to parse, so that subscribers
	// resolving at once would overlap if each parsed its own.
	kubeconfig := func(token string) []byte {
		var b strings.Builder
		b.Write(kubeconfigBytes(t, "https://10.0.0.7:6443", c.caPEM, token, nil, nil))
		b.WriteString("extensions:\n")
		for i := range 1000 { // 7 nodes each, within the node budget
			fmt.Fprintf(&b, "- {name: e%d, extension: {k: v}}\n", i)
		}
		return []byte(b.String())
	}
	refs := map[string]string{}
	for i := range gateways {
		refs[fmt.Sprintf("gw-%d", i)] = "shared-kubeconfig"
	}
	store, client := sourceStore(t, []*corev1.Secret{capiSecret("shared-kubeconfig", "1", kubeconfig("token-1"))}, refs)

	var mu sync.Mutex
	seen := make([]map[string]string, subscribers) // subscriber -> gateway -> token last seen
	calls := make([]int, subscribers)
	for i := range subscribers {
		seen[i] = map[string]string{}
		if err := store.OnChange(func(_, new *Gateway) {
			if new != nil {
				mu.Lock()
				seen[i][new.Name()] = new.Conn.Token
				calls[i]++
				mu.Unlock()
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	allSaw := func(token string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range seen {
				for gw := range refs {
					if m[gw] != token {
						return false
					}
				}
			}
			return true
		}
	}
	callsNow := func() []int {
		mu.Lock()
		defer mu.Unlock()
		return append([]int(nil), calls...)
	}
	parses := sourceParses.Load()
	parsed := func(what string) {
		t.Helper()
		if got := sourceParses.Load() - parses; got != 1 {
			t.Errorf("%s: the kubeconfig was parsed %d times by %d gateways and %d subscribers, want once", what, got, gateways, subscribers)
		}
		parses = sourceParses.Load()
	}
	startStore(t, store)
	// Subscribers may first hear of the gateways before the source's
	// namespace is synced (SourceNotRead), so the first read is Get's.
	for gw := range refs {
		if g, err := store.Get(gw); err != nil || g.Conn.Token != "token-1" {
			t.Fatalf("%s: %+v, %v; want the first token", gw, g, err)
		}
	}
	parsed("first read")

	update := func(rv string, kubeconfig []byte, labels map[string]string) {
		t.Helper()
		s := capiSecret("shared-kubeconfig", rv, kubeconfig)
		s.Labels = labels
		if _, err := client.CoreV1().Secrets(sourceNamespace).Update(t.Context(), s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	update("2", kubeconfig("token-2"), nil)
	testpoll.EventuallyTrue(t, 30*time.Second, "every subscriber to see the rotated token", allSaw("token-2"))
	parsed("a rotation")

	// Requests resolving at once while the Secret rotates: still once.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for gw := range refs {
					_, _ = store.Get(gw)
				}
			}
		})
	}
	update("3", kubeconfig("token-3"), nil)
	testpoll.EventuallyTrue(t, 30*time.Second, "every subscriber to see the token rotated under requests", allSaw("token-3"))
	close(stop)
	wg.Wait()
	parsed("a rotation under concurrent requests")

	// Only metadata changes: every subscriber hears of each gateway, and
	// nothing is parsed.
	was := callsNow()
	update("4", kubeconfig("token-3"), map[string]string{"team": "a"})
	testpoll.EventuallyTrue(t, 30*time.Second, "every subscriber to hear of the metadata change", func() bool {
		now := callsNow()
		for i := range now {
			if now[i] < was[i]+gateways {
				return false
			}
		}
		return true
	})
	if got := sourceParses.Load() - parses; got != 0 {
		t.Errorf("a write that changed only metadata parsed the kubeconfig %d times, want none", got)
	}

	// The same version handed over again is the Source already held.
	obj, _, _ := store.sources.byNamespace[sourceNamespace].GetIndexer().GetByKey(sourceNamespace + "/shared-kubeconfig")
	held := obj.(*Source)
	sec, err := client.CoreV1().Secrets(sourceNamespace).Get(t.Context(), "shared-kubeconfig", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if again := newSource(sec, held); again != held {
		t.Errorf("the same version of the Secret read again made a new Source")
	}
}
