package fanout

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// listed is a list read as a client does: page after page, each following
// the last one's continue token.
type listed struct {
	pages    []listOut
	all      listOut // every page's items and rows; the last page's metadata
	body     []byte  // every page's body
	warnings string  // every page's Warning headers
}

func (fx *fixture) list(t *testing.T, path, accept string) listed {
	t.Helper()
	var ls listed
	for next := ""; ; {
		p := path
		if next != "" {
			sep := "?"
			if strings.Contains(p, "?") {
				sep = "&"
			}
			p += sep + "continue=" + url.QueryEscape(next)
		}
		resp, b := fx.get(t, p, accept)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("page %d: status %d: %s", len(ls.pages)+1, resp.StatusCode, b)
		}
		l := decode(t, b)
		ls.pages = append(ls.pages, l)
		ls.body = append(ls.body, b...)
		ls.warnings += strings.Join(resp.Header.Values("Warning"), "\n") + "\n"
		if ls.all.Kind == "" {
			ls.all.Kind, ls.all.ColumnDefinitions = l.Kind, l.ColumnDefinitions
		}
		ls.all.Items = append(ls.all.Items, l.Items...)
		ls.all.Rows = append(ls.all.Rows, l.Rows...)
		ls.all.Metadata = l.Metadata
		if next = l.Metadata.Continue; next == "" {
			return ls
		}
		if len(ls.pages) > 500 {
			t.Fatalf("over 500 pages; the last token %s", next)
		}
	}
}

// names are the items' (or rows') cluster/name, sorted.
func (l listOut) names() []string {
	var out []string
	for _, it := range l.Items {
		out = append(out, it.Metadata.Annotations[ClusterAnnotation]+"/"+it.Metadata.Name)
	}
	for _, r := range l.Rows {
		out = append(out, r.Cells[0]+"/"+r.Object.Metadata.Name)
	}
	slices.Sort(out)
	return out
}

func podNames(clusters map[string]int) []string {
	var out []string
	for c, n := range clusters {
		for i := range n {
			out = append(out, fmt.Sprintf("%s/%s-%d", c, c, i))
		}
	}
	slices.Sort(out)
	return out
}

// A paged list over clusters of uneven sizes (one empty, one larger than
// any page) returns at most limit items a page, and every item of every
// cluster exactly once, whatever the limit and the number read at once.
func TestPagedListReturnsEveryItemOnce(t *testing.T) {
	sizes := map[string]int{"a": 7, "b": 0, "c": 3, "d": 12, "e": 1}
	want := podNames(sizes)
	for _, max := range []int{0, 2} {
		for _, limit := range []int{1, 2, 3, 5, 8, 100} {
			for _, accept := range []string{"", acceptTable} {
				t.Run(fmt.Sprintf("max=%d,limit=%d,table=%v", max, limit, accept != ""), func(t *testing.T) {
					clusters := map[string]*cluster{}
					for n, p := range sizes {
						clusters[n] = &cluster{pods: p}
					}
					fx := newFixture(t, Config{MaxClusters: max}, clusters)
					ls := fx.list(t, fmt.Sprintf("/sets/labels:env=prod/proxy/api/v1/pods?limit=%d", limit), accept)
					if got := ls.all.names(); !slices.Equal(got, want) {
						t.Errorf("items %v, want each of %v exactly once", got, want)
					}
					for i, p := range ls.pages {
						if n := len(p.Items) + len(p.Rows); n > limit {
							t.Errorf("page %d has %d items, over the limit %d", i+1, n, limit)
						}
						if i < len(ls.pages)-1 && !strings.HasPrefix(p.Metadata.Continue, continuePrefix) {
							t.Errorf("page %d: continue %q", i+1, p.Metadata.Continue)
						}
					}
					if limit == 100 && len(ls.pages) != 1 {
						t.Errorf("%d pages, want 1: every item fits in the limit", len(ls.pages))
					}
					if limit < 23 && len(ls.pages) < 23/limit {
						t.Errorf("%d pages for 23 items at a limit of %d", len(ls.pages), limit)
					}
					rvs, _, err := decodeRV(ls.all.Metadata.ResourceVersion)
					if err != nil || len(rvs) != len(sizes) || rvs["d"] != "rv-d" {
						t.Errorf("the last page's resourceVersion %v (%v), want every cluster's", rvs, err)
					}
				})
			}
		}
	}
}

// A cluster that fails on its first page is a warning; one that fails in
// the middle of its list is a warning saying its list is incomplete; the
// other clusters' items still arrive, each exactly once.
func TestPagedListWithFailingClusters(t *testing.T) {
	fx := newFixture(t, Config{MaxClusters: 2}, map[string]*cluster{
		"a": {pods: 5}, "down": {fail: 503}, "mid": {pods: 6, failCont: 503}, "z": {pods: 4},
	})
	ls := fx.list(t, "/sets/labels:env=prod/proxy/api/v1/pods?limit=3", "")
	got := ls.all.names()
	for _, n := range podNames(map[string]int{"a": 5, "z": 4}) {
		if !slices.Contains(got, n) {
			t.Errorf("%s missing from %v", n, got)
		}
	}
	var mid []string
	for _, n := range got {
		if strings.HasPrefix(n, "mid/") {
			mid = append(mid, n)
		}
	}
	if len(got) != len(slices.Compact(slices.Clone(got))) {
		t.Errorf("an item came twice: %v", got)
	}
	if len(mid) == 0 || len(mid) == 6 {
		t.Errorf("mid's items %v: want its first page only (it fails when continued)", mid)
	}
	if !strings.Contains(ls.warnings, `cluster \"down\"`) || !strings.Contains(ls.warnings, "cluster down is down") {
		t.Errorf("warnings %q: want down's", ls.warnings)
	}
	if !strings.Contains(ls.warnings, `cluster \"mid\"`) || !strings.Contains(ls.warnings, "misses its items after those already listed") {
		t.Errorf("warnings %q: want mid's, saying its list is incomplete", ls.warnings)
	}
}

// A cluster's own 410 (its continue token expired) is the set's 410
// Expired, which client-go's pager answers with a full list.
func TestExpiredClusterTokenIsExpired(t *testing.T) {
	fx := newFixture(t, Config{}, map[string]*cluster{"a": {pods: 4}, "old": {pods: 4, failCont: http.StatusGone}})
	resp, b := fx.get(t, "/sets/labels:env=prod/proxy/api/v1/pods?limit=2", "")
	l := decode(t, b)
	if resp.StatusCode != 200 || l.Metadata.Continue == "" {
		t.Fatalf("first page: %d %s", resp.StatusCode, b)
	}
	var s metav1.Status
	for range 3 { // old's 410 may come after a page's answer began: then the next page answers it
		resp, b = fx.get(t, "/sets/labels:env=prod/proxy/api/v1/pods?limit=2&continue="+url.QueryEscape(l.Metadata.Continue), "")
		if resp.StatusCode != 200 {
			break
		}
		l = decode(t, b)
	}
	if err := json.Unmarshal(b, &s); err != nil || resp.StatusCode != http.StatusGone || s.Reason != metav1.StatusReasonExpired || !strings.Contains(s.Message, "list again") {
		t.Errorf("%d %s: want 410 Expired saying to list again", resp.StatusCode, b)
	}
}

// A list from the set's resourceVersion that one cluster answers 410 (its
// version compacted) is the set's 410 Expired, as a watch's is: the client
// lists again without a resourceVersion. If the 410 comes after the answer
// began, the answer's continue token holds the cluster and the next page
// answers it.
func TestListFromAnExpiredResourceVersionIsExpired(t *testing.T) {
	fx := newFixture(t, Config{}, map[string]*cluster{"a": {pods: 4}, "old": {pods: 4, goneRV: true}})
	rv := encodeRV(map[string]string{"a": "5", "old": "5"})
	resp, b := fx.get(t, "/sets/labels:env=prod/proxy/api/v1/pods?resourceVersion="+url.QueryEscape(rv), "")
	for range 3 {
		if resp.StatusCode != 200 {
			break
		}
		l := decode(t, b)
		if l.Metadata.Continue == "" {
			t.Fatalf("a 200 without old's items and no continue token: %s", b)
		}
		resp, b = fx.get(t, "/sets/labels:env=prod/proxy/api/v1/pods?continue="+url.QueryEscape(l.Metadata.Continue), "")
	}
	var s metav1.Status
	if err := json.Unmarshal(b, &s); err != nil || resp.StatusCode != http.StatusGone || s.Reason != metav1.StatusReasonExpired ||
		!strings.Contains(s.Message, `"old"`) || !strings.Contains(s.Message, "list again without") {
		t.Errorf("%d %s: want 410 Expired naming old, saying to list again", resp.StatusCode, b)
	}
}

// A continue token is checked: one that is not the gateway's, or was given
// for another list, or was edited into nonsense, is a 400 saying to list
// again; none reaches a cluster.
func TestBadContinueTokens(t *testing.T) {
	fx := newFixture(t, Config{}, map[string]*cluster{"a": {pods: 3}})
	path := "/sets/labels:env=prod/proxy/api/v1/pods"
	key := tokenKey("labels:env=prod", "/api/v1/pods")
	enc := func(s string) string { return continuePrefix + base64.RawURLEncoding.EncodeToString([]byte(s)) }
	other := encodeContinue(&listToken{Key: tokenKey("labels:env=prod", "/api/v1/configmaps"), Open: []*openCluster{{Name: "a", Continue: "1"}}})
	for name, tok := range map[string]string{
		"a cluster's own":   "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MSwic3RhcnQiOiJhIn0",
		"not base64":        continuePrefix + "!!!",
		"not JSON":          enc("{"),
		"an unknown field":  enc(`{"k":"` + key + `","x":1}`),
		"data after":        enc(`{"k":"` + key + `"} {}`),
		"another list's":    other,
		"a bad name":        enc(`{"k":"` + key + `","o":[{"n":"A/../b"}]}`),
		"a name twice":      enc(`{"k":"` + key + `","o":[{"n":"a"},{"n":"a"}]}`),
		"a null cluster":    enc(`{"k":"` + key + `","o":[null]}`),
		"token and version": enc(`{"k":"` + key + `","o":[{"n":"a","c":"1","r":"5"}]}`),
		"a bad match":       enc(`{"k":"` + key + `","m":"Any"}`),
		"too large":         continuePrefix + strings.Repeat("A", maxContinueBytes),
	} {
		resp, b := fx.get(t, path+"?limit=2&continue="+url.QueryEscape(tok), "")
		var s metav1.Status
		_ = json.Unmarshal(b, &s)
		if resp.StatusCode != http.StatusBadRequest || s.Reason != metav1.StatusReasonBadRequest || !strings.Contains(s.Message, "list again without continue") {
			t.Errorf("%s: %d %s, want 400 saying to list again", name, resp.StatusCode, b)
		}
	}
	good := encodeContinue(&listToken{Key: key, Open: []*openCluster{{Name: "a", Continue: "1"}}})
	resp, b := fx.get(t, path+"?limit=2&resourceVersion=5&continue="+url.QueryEscape(good), "")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "resource version is not allowed when using continue") {
		t.Errorf("continue with a resourceVersion: %d %s, want 400 as kube-apiserver answers", resp.StatusCode, b)
	}
	if got := fx.clusters["a"].pages.Load(); got != 0 {
		t.Errorf("a bad token reached a cluster (%d reads)", got)
	}
	resp, b = fx.get(t, path+"?limit=2&continue="+url.QueryEscape(good), "")
	if l := decode(t, b); resp.StatusCode != 200 || !slices.Equal(l.names(), []string{"a/a-1", "a/a-2"}) {
		t.Errorf("a good token: %d %s, want a-1 and a-2", resp.StatusCode, b)
	}
}

// Each page reads only the clusters the caller may use now: a token that
// names a cluster the caller may not use, or one deleted, does not read
// it (nor names it), and a cluster added mid-list is not added.
func TestContinueReadsOnlyAllowedClusters(t *testing.T) {
	fx := newFixture(t, Config{}, map[string]*cluster{"a": {pods: 4}, "secret": {pods: 4}, "gone": {pods: 4}, "late": {pods: 4}})
	fx.forbid["secret"] = true
	delete(fx.gws, "late")
	path := "/sets/labels:env=prod/proxy/api/v1/pods?limit=2"
	key := tokenKey("labels:env=prod", "/api/v1/pods")
	// Forged: a token naming a cluster the caller may not use.
	forged := encodeContinue(&listToken{Key: key, Open: []*openCluster{{Name: "secret", Continue: "1"}, {Name: "a"}}, RVs: map[string]string{"secret": "rv-secret"}})
	resp, b := fx.get(t, path+"&continue="+url.QueryEscape(forged), "")
	l := decode(t, b)
	if resp.StatusCode != 200 || strings.Contains(string(b), "secret") || strings.Contains(strings.Join(resp.Header.Values("Warning"), ""), "secret") {
		t.Errorf("%d %s %v: want a's items, secret named nowhere", resp.StatusCode, b, resp.Header.Values("Warning"))
	}
	if _, read := fx.served.Load("secret"); read {
		t.Error("a token made the gateway read a cluster the caller may not use")
	}
	// A real list: gone is deleted and late is created after its first page.
	resp, b = fx.get(t, path, "")
	if l = decode(t, b); resp.StatusCode != 200 || l.Metadata.Continue == "" {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	fx.mu.Lock()
	delete(fx.gws, "gone")
	fx.gws["late"] = labels.Set{"env": "prod"}
	fx.mu.Unlock()
	gonePages := fx.clusters["gone"].pages.Load()
	var got []string
	got = append(got, l.names()...)
	for l.Metadata.Continue != "" {
		resp, b = fx.get(t, path+"&continue="+url.QueryEscape(l.Metadata.Continue), "")
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		l = decode(t, b)
		got = append(got, l.names()...)
	}
	if n := fx.clusters["gone"].pages.Load(); n != gonePages {
		t.Errorf("the deleted cluster was read after its deletion (%d reads, %d before)", n, gonePages)
	}
	if _, read := fx.served.Load("late"); read {
		t.Error("a cluster created mid-list was added to it")
	}
	for _, n := range podNames(map[string]int{"a": 4}) {
		if !slices.Contains(got, n) {
			t.Errorf("%s missing from %v", n, got)
		}
	}
	if rvs, _, _ := decodeRV(l.Metadata.ResourceVersion); rvs["gone"] != "" {
		t.Errorf("the last page's resourceVersion %v still names the deleted cluster", rvs)
	}
}

// One cluster that stalls delays only its own rows: the other clusters'
// rows arrive, streamed, while it has not answered; then its own.
func TestStalledClusterDelaysOnlyItsRows(t *testing.T) {
	for _, limit := range []string{"", "?limit=100"} {
		t.Run("limit="+limit, func(t *testing.T) {
			stall := make(chan struct{})
			fx := newFixture(t, Config{FirstRowWait: 0, ClusterTimeout: time.Minute}, map[string]*cluster{"a": {pods: 2}, "b": {pods: 2}, "slow": {pods: 2, stall: stall}})
			resp, err := http.Get(fx.srv.URL + "/sets/labels:env=prod/proxy/api/v1/pods" + limit)
			if err != nil {
				close(stall)
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var seen []byte
			buf := make([]byte, 4096)
			for !(strings.Contains(string(seen), `"a-1"`) && strings.Contains(string(seen), `"b-1"`)) {
				n, err := resp.Body.Read(buf)
				seen = append(seen, buf[:n]...)
				if err != nil && !(strings.Contains(string(seen), `"a-1"`) && strings.Contains(string(seen), `"b-1"`)) {
					close(stall)
					t.Fatalf("the answer ended before a's and b's rows: %v\n%s", err, seen)
				}
			}
			if strings.Contains(string(seen), "slow-") {
				t.Fatalf("slow's rows came before it answered: %s", seen)
			}
			close(stall) // slow answers now
			rest, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			l := decode(t, append(seen, rest...))
			if want := podNames(map[string]int{"a": 2, "b": 2, "slow": 2}); !slices.Equal(l.names(), want) || l.Metadata.Continue != "" {
				t.Errorf("items %v (continue %q), want %v", l.names(), l.Metadata.Continue, want)
			}
		})
	}
}

// A cluster that fails after the answer began cannot be a Warning header:
// the answer ends with a continue token that keeps it, and the next page
// reads it before its answer begins, so its failure is that page's
// warning (kubectl prints it). A client that does not follow continue sees
// a list whose metadata.continue says it is incomplete.
func TestLateFailureIsTheNextPagesWarning(t *testing.T) {
	stall := make(chan struct{})
	fx := newFixture(t, Config{FirstRowWait: 0, ClusterTimeout: time.Minute}, map[string]*cluster{"a": {pods: 2}, "late": {fail: 503, stall: stall}})
	resp, err := http.Get(fx.srv.URL + "/sets/labels:env=prod/proxy/api/v1/pods")
	if err != nil {
		close(stall)
		t.Fatal(err)
	}
	var seen []byte
	buf := make([]byte, 4096)
	for !strings.Contains(string(seen), `"a-1"`) {
		n, err := resp.Body.Read(buf)
		seen = append(seen, buf[:n]...)
		if err != nil && !strings.Contains(string(seen), `"a-1"`) {
			close(stall)
			t.Fatalf("the answer ended before a's rows: %v\n%s", err, seen)
		}
	}
	close(stall)
	rest, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	l := decode(t, append(seen, rest...))
	if len(resp.Header.Values("Warning")) != 0 || l.Metadata.Continue == "" || !slices.Equal(l.names(), []string{"a/a-0", "a/a-1"}) {
		t.Fatalf("first answer: warnings %v, %s; want a's items, no warning, and a continue token", resp.Header.Values("Warning"), append(seen, rest...))
	}
	resp, b := fx.get(t, "/sets/labels:env=prod/proxy/api/v1/pods?continue="+url.QueryEscape(l.Metadata.Continue), "")
	l = decode(t, b)
	if w := strings.Join(resp.Header.Values("Warning"), "\n"); resp.StatusCode != 200 || !strings.Contains(w, `cluster \"late\"`) || !strings.Contains(w, "cluster late is down") || len(l.names()) != 0 || l.Metadata.Continue != "" {
		t.Errorf("next page: %d, warnings %q, %s; want late's warning, no item, no continue", resp.StatusCode, w, b)
	}
}
