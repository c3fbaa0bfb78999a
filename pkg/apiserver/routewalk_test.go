package apiserver

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	restclient "k8s.io/client-go/rest"

	"github.com/clustergateway/cluster-gateway/internal/testgateways"
	"github.com/clustergateway/cluster-gateway/internal/testpki"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
)

// The README's route, walked: a GET through the assembled gateway (the
// generic server's handler chain as New builds it, the proxy, the pool) to a
// real managed-cluster stand-in over TLS enters each of the project's
// packages at most once.
//
// Walking it, the test records the call stack (runtime.Callers) of the
// serving goroutine at every point it can see from outside: every read of
// the request's context that reaches the context the test gave it (each
// filter's and the proxy's look-ups of what is not set, and the pooled
// transport's at the round trip), every call of the hub's authorizer (the
// generic filter's, and the proxy's of the inner request), of the audit
// policy (the audit filter), and of the hub caller's user.Info (the
// proxy's fair-share slot, its audit annotation and its impersonation
// headers, written at the round trip). It then checks, over the project's
// frames (code in this repository's files, test files left out):
//   - in each stack, each package is one contiguous run: no package calls
//     into another that calls back into it;
//   - along the walk, once the route has left a package (no frame of it
//     remains below the point where two successive stacks part), no later
//     stack enters it again.
//
// The walk must reach the wire: one stack is the transport's round trip.
//
//	go test -run TestRouteEntersEachPackageOnce -v ./pkg/apiserver/
//
// prints the route as the packages of that stack.
func TestRouteEntersEachPackageOnce(t *testing.T) {
	const ns, cluster = "cluster-gateway-system", "walked"
	ca := testpki.MustCA(t, "walk-ca")
	serving := ca.MustIssue(t, testpki.Spec{CommonName: "kube-apiserver", IPs: []string{"127.0.0.1"}, Server: true})
	backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/namespaces/default" || r.Header.Get("Authorization") != "Bearer walk-token" ||
			r.Header.Get("Impersonate-User") != "walker" {
			http.Error(w, "unexpected request", http.StatusTeapot)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"default"}}`)
	}))
	backend.EnableHTTP2 = true
	backend.TLS = &tls.Config{Certificates: []tls.Certificate{serving.TLS()}}
	backend.StartTLS()
	t.Cleanup(backend.Close)

	hub := newSecretsHub(t, ns, &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: cluster, Namespace: ns, ResourceVersion: "1", UID: "walk-uid", Labels: map[string]string{gateways.LabelGateway: "true"}},
		Data: map[string][]byte{
			gateways.KeyEndpointType:   []byte("Direct"),
			gateways.KeyEndpoint:       []byte(backend.URL),
			gateways.KeyCABundle:       ca.CertPEM,
			gateways.KeyCredentialType: []byte("BearerToken"),
			gateways.KeyToken:          []byte("walk-token"),
			gateways.KeyImpersonation:  []byte("Caller"),
		},
	})

	w := &walk{}
	caller := &probedUser{w: w, u: &user.DefaultInfo{Name: "walker", Groups: []string{"walkers", user.AllAuthenticated}}}
	authorized := 0
	s := assembledServerWith(t, func(c *Config) {
		g := c.Generic
		g.ClientConfig = &restclient.Config{Host: hub.URL}
		g.Authentication.Authenticator = authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
			return &authenticator.Response{User: caller}, true, nil
		})
		g.Authorization.Authorizer = authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
			w.record("authorizer")
			authorized++
			return authorizer.DecisionAllow, "", nil
		})
		g.AuditPolicyRuleEvaluator = probedPolicy{w}
		g.AuditBackend = discardAudit{}
		c.Extra.AuthorizeProxySubpath = true
	})
	testgateways.Run(t, s.Store.Run, "the store has the gateway", func() bool {
		_, err := s.Clusters.Get(cluster)
		return err == nil
	})

	target := "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/" + cluster + "/proxy/api/v1/namespaces/default"
	serve := func(rw http.ResponseWriter, r *http.Request) {
		s.Generic.Handler.ServeHTTP(rw, r.WithContext(probedContext{Context: r.Context(), w: w}))
	}
	w.root = funcName(serve)
	// Once to warm the pool (its first lease builds the transport and
	// dials), then the walked request: the route of every request.
	for i := range 2 {
		w.reset(i == 1)
		rec := httptest.NewRecorder()
		serve(rec, httptest.NewRequest(http.MethodGet, target, nil))
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"name":"default"`) {
			t.Fatalf("GET through the gateway: %d %s", rec.Code, rec.Body.String())
		}
	}
	if authorized < 2*2 {
		t.Fatalf("the hub's authorizer was called %d times for two requests; want the generic filter's and the proxy's subpath check for each", authorized)
	}

	stacks := w.taken()
	if os.Getenv("WALK_DEBUG") != "" { // every stack taken, with its innermost frames

		for i, st := range stacks {
			var inner []string
			for _, f := range st.frames[max(0, len(st.frames)-8):] {
				inner = append(inner, f.fn)
			}
			t.Logf("%d %s %v\n\t%s", i, st.what, packageRuns(st.frames), strings.Join(inner, "\n\t"))
		}
	}
	wire := -1
	for i, st := range stacks {
		if st.roundTrip {
			wire = i
		}
	}
	if wire < 0 {
		t.Fatalf("none of the %d stacks walked is the transport's round trip: the walk did not reach the wire", len(stacks))
	}
	t.Logf("the route at the round trip: %s", strings.Join(packageRuns(stacks[wire].frames), " -> "))
	for _, p := range walkProblems(stacks) {
		t.Error(p)
	}
}

// frame is one call in a stack: its function, and where in it.
type frame struct {
	fn   string
	file string
	line int
}

// stack is one recorded call stack, outermost frame first.
type stack struct {
	what      string // which probe took it
	frames    []frame
	roundTrip bool // taken in the transport's round trip
}

// walk records the serving goroutine's stacks.
type walk struct {
	mu     sync.Mutex
	root   string // the test's serving function: stacks without it are other goroutines'
	on     bool
	stacks []stack
}

func (w *walk) reset(on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.on, w.stacks = on, nil
}

func (w *walk) taken() []stack {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stacks
}

// record takes the caller's stack, if it is the serving goroutine's.
func (w *walk) record(what string) {
	pcs := make([]uintptr, 256)
	n := runtime.Callers(2, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	var st stack
	st.what = what
	rooted := false
	for {
		f, more := frames.Next()
		st.frames = append(st.frames, frame{fn: f.Function, file: f.File, line: f.Line})
		rooted = rooted || f.Function == w.root
		if strings.HasSuffix(f.Function, "RoundTrip") && projectPackage(frame{fn: f.Function, file: f.File}) == "pkg/pool" {
			st.roundTrip = true // the pooled transport's
		}
		if !more {
			break
		}
	}
	if !rooted {
		return
	}
	for i, j := 0, len(st.frames)-1; i < j; i, j = i+1, j-1 {
		st.frames[i], st.frames[j] = st.frames[j], st.frames[i]
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.on {
		w.stacks = append(w.stacks, st)
	}
}

// repoRoot is the directory of this repository's source, from this file's.
var repoRoot = func() string {
	_, file, _, _ := runtime.Caller(0)
	return strings.TrimSuffix(file, "pkg/apiserver/routewalk_test.go")
}()

// projectPackage is the project package of f ("pkg/proxy"), by the file
// its code is in, or "" for a frame of another module (also one inlined
// into the project's code), the runtime, or a test file.
func projectPackage(f frame) string {
	if !strings.HasPrefix(f.file, repoRoot) || strings.HasSuffix(f.file, "_test.go") {
		return ""
	}
	return path.Dir(strings.TrimPrefix(f.file, repoRoot))
}

// packageRuns is the project packages of frames in order, one entry per run.
func packageRuns(frames []frame) []string {
	var runs []string
	for _, f := range frames {
		if p := projectPackage(f); p != "" && (len(runs) == 0 || runs[len(runs)-1] != p) {
			runs = append(runs, p)
		}
	}
	return runs
}

// walkProblems returns, for stacks taken in order along one request, each
// re-entry into a project package: within a stack (a package whose run is
// broken by another project package), and along the walk (a package entered
// again after the route left it).
func walkProblems(stacks []stack) []string {
	var problems []string
	left := map[string]int{} // package -> the stack after which the route had left it
	for i, st := range stacks {
		runs := packageRuns(st.frames)
		seen := map[string]bool{}
		for _, p := range runs {
			if seen[p] {
				problems = append(problems, fmt.Sprintf("stack %d (%s) enters %s again within one call path: %s", i, st.what, p, strings.Join(runs, " -> ")))
			}
			seen[p] = true
		}
		if i == 0 {
			continue
		}
		prev := stacks[i-1].frames
		common := commonPrefix(prev, st.frames)
		kept := map[string]bool{}
		for _, f := range st.frames[:common] {
			kept[projectPackage(f)] = true
		}
		for _, f := range prev[common:] {
			if p := projectPackage(f); p != "" && !kept[p] {
				if _, ok := left[p]; !ok {
					left[p] = i - 1
				}
			}
		}
		for _, f := range st.frames[common:] {
			p := projectPackage(f)
			if at, ok := left[p]; ok && p != "" {
				problems = append(problems, fmt.Sprintf("stack %d (%s) enters %s again (in %s), which the route left after stack %d (%s): %s",
					i, st.what, p, f.fn, at, stacks[at].what, strings.Join(packageRuns(st.frames), " -> ")))
				delete(left, p) // once per re-entry
			}
		}
	}
	return problems
}

// commonPrefix is how many outer frames a and b share: the same calls, and
// then one activation both are in (the same function, at another line).
func commonPrefix(a, b []frame) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	if n < len(a) && n < len(b) && a[n].fn == b[n].fn {
		n++
	}
	return n
}

// The walk's check fails on a route that goes back into a package, within
// one stack or along the walk, and passes one that goes down once.
func TestWalkProblemsFindReentry(t *testing.T) {
	f := func(pkg, fn string, line int) frame {
		return frame{fn: "github.com/clustergateway/cluster-gateway/" + pkg + "." + fn, file: repoRoot + pkg + "/x.go", line: line}
	}
	chain := frame{fn: "k8s.io/apiserver/pkg/endpoints/filters.WithAuthorization.func1", file: "/k8s/x.go", line: 1}
	route := f("pkg/apiserver", "handler", 1)
	serve := f("pkg/proxy", "(*Proxy).Serve", 10)
	down := []stack{
		{what: "authorizer", frames: []frame{route, chain}},
		{what: "ctx", frames: []frame{route, serve, f("pkg/fairness", "(*Limiter).Acquire", 5)}},
		{what: "ctx", frames: []frame{route, f("pkg/proxy", "(*Proxy).Serve", 20), f("pkg/pool", "(*lease).RoundTrip", 7)}},
	}
	if p := walkProblems(down); len(p) != 0 {
		t.Fatalf("a route that goes down once: %v", p)
	}
	within := []stack{{what: "ctx", frames: []frame{route, serve, f("pkg/clusters", "Handle.Lease", 3), f("pkg/proxy", "callback", 4)}}}
	if p := walkProblems(within); len(p) != 1 || !strings.Contains(p[0], "enters pkg/proxy again within one call path") {
		t.Fatalf("a call back into the proxy within one stack: %v", p)
	}
	along := []stack{
		{what: "ctx", frames: []frame{route, serve, f("pkg/clusters", "(*Owner).GetForRequest", 3)}},
		{what: "ctx", frames: []frame{route, f("pkg/proxy", "(*Proxy).Serve", 30)}},
		{what: "ctx", frames: []frame{route, f("pkg/proxy", "(*Proxy).Serve", 40), f("pkg/clusters", "Handle.Lease", 9)}},
	}
	if p := walkProblems(along); len(p) != 1 || !strings.Contains(p[0], "enters pkg/clusters again") {
		t.Fatalf("a second call into pkg/clusters along the walk: %v", p)
	}
	outer := []stack{
		{what: "ctx", frames: []frame{f("pkg/proxy", "WithInnerMemo.func1", 1), chain}},
		{what: "ctx", frames: []frame{f("pkg/proxy", "WithInnerMemo.func1", 1), chain, route, serve}},
	}
	if p := walkProblems(outer); len(p) != 1 || !strings.Contains(p[0], "within one call path") {
		t.Fatalf("an outermost filter in the proxy's package: %v", p)
	}
}

func funcName(fn any) string { return runtime.FuncForPC(reflect.ValueOf(fn).Pointer()).Name() }

// probedContext records the stack of every look-up that reaches it: the
// ones no context the route derived from it answers.
type probedContext struct {
	context.Context
	w *walk
}

func (c probedContext) Value(key any) any {
	c.w.record(fmt.Sprintf("context %T", key))
	return c.Context.Value(key)
}

// probedUser records the stack of every read of the hub caller.
type probedUser struct {
	w *walk
	u user.Info
}

func (p *probedUser) GetName() string               { p.w.record("user name"); return p.u.GetName() }
func (p *probedUser) GetUID() string                { p.w.record("user UID"); return p.u.GetUID() }
func (p *probedUser) GetGroups() []string           { p.w.record("user groups"); return p.u.GetGroups() }
func (p *probedUser) GetExtra() map[string][]string { p.w.record("user extra"); return p.u.GetExtra() }

// probedPolicy audits every request at Metadata and records the audit
// filter's stack.
type probedPolicy struct{ w *walk }

func (p probedPolicy) EvaluatePolicyRule(authorizer.Attributes) audit.RequestAuditConfig {
	p.w.record("audit policy")
	return audit.RequestAuditConfig{Level: auditinternal.LevelMetadata}
}

// discardAudit is an audit backend that keeps nothing.
type discardAudit struct{}

func (discardAudit) ProcessEvents(...*auditinternal.Event) bool { return true }
func (discardAudit) Run(<-chan struct{}) error                  { return nil }
func (discardAudit) Shutdown()                                  {}
func (discardAudit) String() string                             { return "discard" }

// newSecretsHub is a hub that serves only the list and watch of the
// Secrets of namespace ns (the gateway store's informer): secrets, and a
// watch that stays open without further events until the test ends.
func newSecretsHub(t *testing.T, ns string, secrets ...*corev1.Secret) *httptest.Server {
	t.Helper()
	list := &corev1.SecretList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "SecretList"}, ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
	for _, s := range secrets {
		list.Items = append(list.Items, *s)
	}
	body, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/namespaces/"+ns+"/secrets" {
			http.Error(w, "not served here", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") != "true" {
			_, _ = w.Write(body)
			return
		}
		w.WriteHeader(http.StatusOK)
		if r.URL.Query().Get("sendInitialEvents") == "true" {
			// client-go's streaming list: the Secrets as events, then
			// the bookmark that ends them.
			enc := json.NewEncoder(w)
			for i := range list.Items {
				_ = enc.Encode(map[string]any{"type": "ADDED", "object": &list.Items[i]})
			}
			_ = enc.Encode(map[string]any{"type": "BOOKMARK", "object": &corev1.Secret{
				TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
				ObjectMeta: metav1.ObjectMeta{ResourceVersion: "1", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}},
			}})
		}
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-done:
		}
	}))
	t.Cleanup(func() { close(done); hub.Close() })
	return hub
}
