package fanout

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/clustergateway/cluster-gateway/pkg/multicluster"
)

// The clusters here stand in for proxy.Serve (the single-cluster path, which
// pkg/proxy's tests and the e2e test TestFanout run against real clusters):
// each answers as a kube-apiserver does, with pages, Tables and watch
// streams, so that the merge can be checked item by item.

type fakeGateways map[string]labels.Set

func (g fakeGateways) Names(sel labels.Selector) ([]string, error) {
	var out []string
	for n, l := range g {
		if sel.Matches(l) {
			out = append(out, n)
		}
	}
	return out, nil
}

func (g fakeGateways) Exists(name string) bool { _, ok := g[name]; return ok }

// lockedGateways lets a test change the fixture's gateways between pages.
type lockedGateways struct{ fx *fixture }

func (g lockedGateways) Names(sel labels.Selector) ([]string, error) {
	g.fx.mu.Lock()
	defer g.fx.mu.Unlock()
	return g.fx.gws.Names(sel)
}

func (g lockedGateways) Exists(name string) bool {
	g.fx.mu.Lock()
	defer g.fx.mu.Unlock()
	return g.fx.gws.Exists(name)
}

// cluster is one stand-in cluster: pods named <cluster>-<i>.
type cluster struct {
	pods     int
	fail     int           // answer this HTTP code with a Status
	silent   bool          // never answer (until the request ends)
	aborts   bool          // panic with http.ErrAbortHandler, as the reverse proxy does when its writes fail
	events   []string      // watch: event types to send, then keep the stream open
	gone     bool          // watch: answer 410
	delay    time.Duration // watch: before the events
	failCont int           // a read with a continue token answers this HTTP code (a failure mid-list)
	goneRV   bool          // a list from a resourceVersion answers 410 (compacted)
	stall    chan struct{} // a list waits until it is closed (or the request ends)
	inFlight *atomic.Int32 // shared: reads in flight
	maxSeen  *atomic.Int32
	lastRV   atomic.Value // the resourceVersion its last watch was asked from
	pages    atomic.Int32
}

func podJSON(name string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"metadata":{"name":%q,"namespace":"default","resourceVersion":"7","annotations":{"a":"b"}},"spec":{}}`, name))
}

func (c *cluster) serve(name string, w http.ResponseWriter, req *http.Request) {
	if c.inFlight != nil {
		n := c.inFlight.Add(1)
		defer c.inFlight.Add(-1)
		for {
			m := c.maxSeen.Load()
			if n <= m || c.maxSeen.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	if c.stall != nil && req.URL.Query().Get("watch") != "true" {
		select {
		case <-c.stall:
		case <-req.Context().Done():
			return
		}
	}
	if c.silent {
		<-req.Context().Done()
		// As proxy.Serve does at an ordinary request's deadline.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusGatewayTimeout)
		_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Failure", Code: 504, Reason: metav1.StatusReasonTimeout, Message: "request did not complete within the allotted timeout"})
		return
	}
	if c.aborts {
		panic(http.ErrAbortHandler)
	}
	if c.fail != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(c.fail)
		_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Failure", Code: int32(c.fail), Message: "cluster " + name + " is down"})
		return
	}
	q := req.URL.Query()
	if c.failCont != 0 && q.Get("continue") != "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(c.failCont)
		reason := metav1.StatusReasonServiceUnavailable
		if c.failCont == http.StatusGone {
			reason = metav1.StatusReasonExpired
		}
		_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Failure", Code: int32(c.failCont), Reason: reason, Message: "cluster " + name + " cannot continue"})
		return
	}
	if c.goneRV && q.Get("watch") != "true" && q.Get("continue") == "" && q.Get("resourceVersion") != "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusGone)
		_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Failure", Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if q.Get("watch") == "true" {
		c.lastRV.Store(q.Get("resourceVersion"))
		if c.gone {
			w.WriteHeader(http.StatusGone)
			_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Failure", Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
			return
		}
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		time.Sleep(c.delay)
		for i, t := range c.events {
			obj := podJSON(fmt.Sprintf("%s-w%d", name, i))
			switch t {
			case "BOOKMARK":
				obj = json.RawMessage(fmt.Sprintf(`{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"%d"}}`, 100+i))
			}
			b, _ := json.Marshal(map[string]any{"type": t, "object": obj})
			_, _ = w.Write(append(b, '\n'))
			http.NewResponseController(w).Flush()
		}
		<-req.Context().Done()
		return
	}
	limit, _ := strconv.Atoi(q.Get("limit"))
	start, _ := strconv.Atoi(q.Get("continue"))
	end := c.pods
	if limit > 0 && start+limit < end {
		end = start + limit
	}
	cont := ""
	if end < c.pods {
		cont = strconv.Itoa(end)
	}
	c.pages.Add(1)
	meta := map[string]string{"resourceVersion": "rv-" + name, "continue": cont}
	if strings.Contains(req.Header.Get("Accept"), "as=Table") {
		rows := []map[string]any{}
		for i := start; i < end; i++ {
			// The cells in this cluster's own order: a cluster of another
			// version may order its columns otherwise.
			rows = append(rows, map[string]any{"cells": []any{"Running", fmt.Sprintf("%s-%d", name, i)}, "object": podJSON(fmt.Sprintf("%s-%d", name, i))})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
			"columnDefinitions": []metav1.TableColumnDefinition{{Name: "Status", Type: "string"}, {Name: "Name", Type: "string"}}, "rows": rows})
		return
	}
	items := []json.RawMessage{}
	for i := start; i < end; i++ {
		items = append(items, podJSON(fmt.Sprintf("%s-%d", name, i)))
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": items})
}

type fixture struct {
	clusters map[string]*cluster
	srv      *httptest.Server
	f        *FanOut
	gws      fakeGateways
	mu       sync.Mutex // guards forbid and gws once requests run
	forbid   map[string]bool
	served   sync.Map // cluster names Serve was called for
}

func newFixture(t *testing.T, cfg Config, clusters map[string]*cluster) *fixture {
	t.Helper()
	fx := &fixture{clusters: clusters, forbid: map[string]bool{}}
	gws := fakeGateways{}
	for n := range clusters {
		gws[n] = labels.Set{"env": "prod"}
	}
	fx.gws = gws
	authz := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		fx.mu.Lock()
		defer fx.mu.Unlock()
		if a.GetResource() == "clustergateways" && a.GetSubresource() == "proxy" && a.GetVerb() == "get" && !fx.forbid[a.GetName()] {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionDeny, "", nil
	})
	f, err := New(Params{Gateways: lockedGateways{fx}, Authorizer: authz, Config: cfg, Serve: func(w http.ResponseWriter, req *http.Request, name, subpath string) {
		fx.served.Store(name, true)
		clusters[name].serve(name, w, req)
	}})
	if err != nil {
		t.Fatal(err)
	}
	fx.f = f
	// What the hub's handler chain gives the route: a user, the request
	// info and a warning recorder.
	h := genericapifilters.WithWarningRecorder(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		set, sub, _ := strings.Cut(strings.TrimPrefix(req.URL.Path, "/sets/"), "/proxy")
		ctx := apirequest.WithUser(req.Context(), &user.DefaultInfo{Name: "alice"})
		f.Serve(w, req.WithContext(ctx), set, sub)
	}))
	fx.srv = httptest.NewServer(h)
	t.Cleanup(fx.srv.Close)
	return fx
}

func (fx *fixture) get(t *testing.T, path, accept string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, fx.srv.URL+path, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

type listOut struct {
	Kind     string `json:"kind"`
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
		Continue        string `json:"continue"`
	} `json:"metadata"`
	Items []struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	} `json:"items"`
	ColumnDefinitions []metav1.TableColumnDefinition `json:"columnDefinitions"`
	Rows              []struct {
		Cells  []string `json:"cells"`
		Object struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		} `json:"object"`
	} `json:"rows"`
}

func decode(t *testing.T, b []byte) listOut {
	t.Helper()
	var l listOut
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatalf("answer is not JSON: %v\n%s", err, b)
	}
	return l
}

func TestListMergesEveryAllowedCluster(t *testing.T) {
	fx := newFixture(t, Config{MaxClusters: 2, PageSize: 2}, map[string]*cluster{ // the gateway's own pages of each cluster (--fanout-page-size)
		"a": {pods: 3}, "b": {pods: 2}, "down": {fail: 503}, "secret": {pods: 1},
	})
	fx.forbid["secret"] = true
	// A cluster that fails after the answer began is in the answer's
	// continue token, and its warning in the next page's: the client
	// follows continue, as client-go's pager and kubectl do.
	ls := fx.list(t, "/sets/labels:env=prod/proxy/api/v1/pods", "")
	l, b := ls.all, ls.body
	if l.Kind != "PodList" {
		t.Errorf("kind %q, want the clusters' PodList", l.Kind)
	}
	var got []string
	for _, it := range l.Items {
		got = append(got, it.Metadata.Annotations[ClusterAnnotation]+"/"+it.Metadata.Name)
		if it.Metadata.Annotations["a"] != "b" {
			t.Errorf("%s lost its own annotation: %v", it.Metadata.Name, it.Metadata.Annotations)
		}
	}
	slices.Sort(got)
	want := []string{"a/a-0", "a/a-1", "a/a-2", "b/b-0", "b/b-1"}
	if !slices.Equal(got, want) {
		t.Errorf("items %v, want each of %v exactly once (pages of 2 followed by the gateway)", got, want)
	}
	warnings := ls.warnings
	if !strings.Contains(warnings, `cluster \"down\"`) || !strings.Contains(warnings, "cluster down is down") {
		t.Errorf("warnings %q: want the failing cluster named with its Status message", warnings)
	}
	if strings.Contains(warnings, "secret") || strings.Contains(string(b), "secret") {
		t.Errorf("the cluster the caller may not use is named: %q %s", warnings, b)
	}
	if _, read := fx.served.Load("secret"); read {
		t.Error("the cluster the caller may not use was read")
	}
	if got := fx.clusters["a"].pages.Load(); got != 2 {
		t.Errorf("cluster a was read in %d pages, want 2 (limit 2, 3 pods)", got)
	}
	rvs, all, err := decodeRV(l.Metadata.ResourceVersion)
	if err != nil || all || rvs["a"] != "rv-a" || rvs["b"] != "rv-b" || len(rvs) != 2 {
		t.Errorf("resourceVersion %q decodes to %v (%v), want a->rv-a, b->rv-b", l.Metadata.ResourceVersion, rvs, err)
	}
}

func TestListReadsAtMostMaxClustersAtOnce(t *testing.T) {
	var inFlight, maxSeen atomic.Int32
	clusters := map[string]*cluster{}
	for i := range 6 {
		clusters[fmt.Sprintf("c%d", i)] = &cluster{pods: 3, inFlight: &inFlight, maxSeen: &maxSeen}
	}
	fx := newFixture(t, Config{MaxClusters: 2}, clusters)
	fx.f.pageSize = 1
	resp, b := fx.get(t, "/sets/names:c0,c1,c2,c3,c4,c5/proxy/api/v1/pods", "")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if n := len(decode(t, b).Items); n != 18 {
		t.Errorf("%d items, want 18", n)
	}
	if m := maxSeen.Load(); m > 2 || m < 1 {
		t.Errorf("%d clusters were read at once, want at most --fanout-max-clusters (2)", m)
	}
}

func TestTableHasClusterColumnAndPlacesCellsByName(t *testing.T) {
	fx := newFixture(t, Config{}, map[string]*cluster{"a": {pods: 2}, "b": {pods: 1}})
	resp, b := fx.get(t, "/sets/labels:/proxy/api/v1/pods", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	l := decode(t, b)
	if l.Kind != "Table" || len(l.ColumnDefinitions) != 3 || l.ColumnDefinitions[0].Name != "Cluster" {
		t.Fatalf("want a Table whose first column is Cluster, got %s", b)
	}
	var got []string
	for _, r := range l.Rows {
		got = append(got, strings.Join(r.Cells, " "))
		if r.Object.Metadata.Annotations[ClusterAnnotation] != r.Cells[0] {
			t.Errorf("row %v: object annotated %q", r.Cells, r.Object.Metadata.Annotations[ClusterAnnotation])
		}
	}
	slices.Sort(got)
	if want := []string{"a Running a-0", "a Running a-1", "b Running b-0"}; !slices.Equal(got, want) {
		t.Errorf("rows %q, want %q", got, want)
	}
}

func TestWritesAreRefused(t *testing.T) {
	fx := newFixture(t, Config{}, map[string]*cluster{"a": {pods: 1}})
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		req, _ := http.NewRequest(m, fx.srv.URL+"/sets/names:a/proxy/api/v1/namespaces/default/pods", strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var s metav1.Status
		_ = json.Unmarshal(b, &s)
		if resp.StatusCode != http.StatusMethodNotAllowed || s.Reason != metav1.StatusReasonMethodNotAllowed || !strings.Contains(s.Message, "read-only") {
			t.Errorf("%s: %d %s, want 405 MethodNotAllowed saying the set is read-only", m, resp.StatusCode, b)
		}
	}
	if _, read := fx.served.Load("a"); read {
		t.Error("a write reached a cluster")
	}
}

func TestSilentClusterIsAWarning(t *testing.T) {
	fx := newFixture(t, Config{ClusterTimeout: 200 * time.Millisecond}, map[string]*cluster{"a": {pods: 1}, "quiet": {silent: true}})
	ls := fx.list(t, "/sets/labels:env=prod/proxy/api/v1/pods", "")
	if len(ls.all.Items) != 1 {
		t.Fatalf("%s; want a's item", ls.body)
	}
	if w := ls.warnings; !strings.Contains(w, "quiet") || !strings.Contains(w, "--fanout-cluster-timeout") {
		t.Errorf("warnings %q: want the silent cluster's timeout", w)
	}
}

func TestSelections(t *testing.T) {
	for in, want := range map[string]string{
		"labels:env=prod":              "env=prod",
		"labels:example.com~tier=gold": "example.com/tier=gold",
		"labels:":                      "",
	} {
		s, err := ParseSelection(in)
		if err != nil || s.Selector.String() != want {
			t.Errorf("%q: %v %v, want selector %q", in, s.Selector, err, want)
		}
		if multicluster.LabelsSet(want) != in {
			t.Errorf("LabelsSet(%q) = %q, want %q", want, multicluster.LabelsSet(want), in)
		}
	}
	if s, err := ParseSelection("names:b,a,b"); err != nil || !slices.Equal(s.Names, []string{"a", "b"}) {
		t.Errorf("names: %v %v", s.Names, err)
	}
	for _, bad := range []string{"env=prod", "names:A_B", "labels:env in (", "names:"} {
		if _, err := ParseSelection(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The reverse proxy panics with http.ErrAbortHandler when a write fails; in
// the fan-out's goroutine that must end the cluster's answer, not the
// gateway (the test binary would crash).
func TestAbortedClusterIsAWarning(t *testing.T) {
	fx := newFixture(t, Config{}, map[string]*cluster{"a": {pods: 1}, "cut": {aborts: true}})
	ls := fx.list(t, "/sets/labels:/proxy/api/v1/pods", "")
	if len(ls.all.Items) != 1 {
		t.Fatalf("%s; want a's item", ls.body)
	}
	if w := ls.warnings; !strings.Contains(w, `\"cut\"`) {
		t.Errorf("warnings %q: want the cut cluster", w)
	}
}
