package fanout

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
)

func TestWatchMergesClustersAndResumesEach(t *testing.T) {
	fx := newFixture(t, Config{ClusterTimeout: 5 * time.Second}, map[string]*cluster{
		"a": {events: []string{"ADDED", "BOOKMARK"}}, "b": {events: []string{"MODIFIED"}}, "down": {fail: 503},
	})
	rv := encodeRV(map[string]string{"a": "5", "b": "6"})
	req, _ := http.NewRequest(http.MethodGet, fx.srv.URL+"/sets/labels:env=prod/proxy/api/v1/pods?watch=true&allowWatchBookmarks=true&resourceVersion="+url.QueryEscape(rv), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if w := resp.Header.Get("Warning"); w == "" {
		t.Error("no warning for the failing cluster")
	}
	for c, want := range map[string]string{"a": "5", "b": "6"} {
		if got, _ := fx.clusters[c].lastRV.Load().(string); got != want {
			t.Errorf("cluster %s watched from %q, want its own %q from the set's resourceVersion", c, got, want)
		}
	}
	sc := bufio.NewScanner(resp.Body)
	seen := map[string]string{}
	var bookmark, wantB string
	for len(seen) < 2 || bookmark == "" {
		if !sc.Scan() {
			t.Fatalf("stream ended: %v; seen %v bookmark %q", sc.Err(), seen, bookmark)
		}
		var ev struct {
			Type   string `json:"type"`
			Object struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
			} `json:"object"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type == "BOOKMARK" {
			bookmark = ev.Object.Metadata.ResourceVersion
			// b is at its event's resourceVersion once the event has
			// passed, else where the watch began.
			wantB = "6"
			if seen["b"] != "" {
				wantB = "7"
			}
			continue
		}
		seen[ev.Object.Metadata.Annotations[ClusterAnnotation]] = ev.Type
	}
	if seen["a"] != "ADDED" || seen["b"] != "MODIFIED" {
		t.Errorf("events %v, want a ADDED and b MODIFIED, each marked with its cluster", seen)
	}
	rvs, _, err := decodeRV(bookmark)
	if err != nil || rvs["a"] != "101" || rvs["b"] != wantB {
		t.Errorf("bookmark resourceVersion %q decodes to %v (%v), want a at its bookmark (101), b at %s", bookmark, rvs, err, wantB)
	}
}

func TestWatchEndsWith410WhenOneClusterIsGone(t *testing.T) {
	fx := newFixture(t, Config{ClusterTimeout: 5 * time.Second}, map[string]*cluster{"a": {events: []string{"ADDED"}}, "old": {gone: true}})
	resp, b := fx.get(t, "/sets/labels:/proxy/api/v1/pods?watch=true&resourceVersion="+url.QueryEscape(encodeRV(map[string]string{"a": "1", "old": "1"})), "")
	if resp.StatusCode != http.StatusGone {
		t.Fatalf("status %d %s, want 410 so that the client lists again", resp.StatusCode, b)
	}
	resp, b = fx.get(t, "/sets/labels:/proxy/api/v1/pods?watch=true&resourceVersion=12", "")
	if resp.StatusCode != http.StatusGone {
		t.Errorf("a resourceVersion the set did not give: status %d %s, want 410", resp.StatusCode, b)
	}
}

// A watch-list (sendInitialEvents, client-go's reflector's first try) is
// refused with 422 Invalid before any cluster is read: client-go gathers
// its initial events by namespace/name, which would make objects of one
// name on two clusters one. The reflector falls back to list and watch on
// this error (and on any but a 410, a 429 or a refused connection).
func TestWatchListIsRefused(t *testing.T) {
	var served atomic.Int32
	srv := watchSet(t, func(w http.ResponseWriter, req *http.Request, _, _ string) {
		served.Add(1)
		streamEvents(w, req, true)
	}, "a", "b")
	for _, v := range []string{"true", "True", "1", ""} {
		resp, err := http.Get(srv.URL + "/sets/labels:/proxy/api/v1/pods?watch=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&sendInitialEvents=" + v)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var st metav1.Status
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatalf("sendInitialEvents=%q: %s: %v", v, b, err)
		}
		if resp.StatusCode != http.StatusUnprocessableEntity || st.Reason != metav1.StatusReasonInvalid ||
			st.Details == nil || len(st.Details.Causes) != 1 || st.Details.Causes[0].Field != "sendInitialEvents" ||
			!strings.Contains(st.Message, "watch from the list's resourceVersion") {
			t.Errorf("sendInitialEvents=%q: status %d %s, want 422 Invalid on sendInitialEvents saying to list, then watch from the list's resourceVersion", v, resp.StatusCode, b)
		}
		if apierrors.IsResourceExpired(apierrors.FromObject(&st)) || apierrors.IsGone(apierrors.FromObject(&st)) || apierrors.IsTooManyRequests(apierrors.FromObject(&st)) {
			t.Errorf("sendInitialEvents=%q: %s is an error client-go's reflector retries the watch-list on, not one it falls back to a list on", v, b)
		}
	}
	if n := served.Load(); n != 0 {
		t.Errorf("%d clusters were read for a refused watch-list, want none", n)
	}
	// The fallback: a watch that does not send initial events (false, as a
	// reflector's resumed watches may say) is served.
	for _, v := range []string{"false", "0"} {
		resp, err := http.Get(srv.URL + "/sets/labels:/proxy/api/v1/pods?watch=true&sendInitialEvents=" + v)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("sendInitialEvents=%s: status %d, want 200", v, resp.StatusCode)
		}
	}
	if n := served.Load(); n != 4 {
		t.Errorf("%d cluster watches for the two watches without initial events, want 4", n)
	}
}

// watchSet serves a set of the named clusters, each answered by serve, as
// the hub's handler chain would give the route a request.
func watchSet(t *testing.T, serve ServeFunc, names ...string) *httptest.Server {
	t.Helper()
	gws := fakeGateways{}
	for _, n := range names {
		gws[n] = labels.Set{}
	}
	allow := authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionAllow, "", nil
	})
	f, err := New(Params{Gateways: gws, Authorizer: allow, Config: Config{ClusterTimeout: 5 * time.Second}, Serve: serve})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(genericapifilters.WithWarningRecorder(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		set, sub, _ := strings.Cut(strings.TrimPrefix(req.URL.Path, "/sets/"), "/proxy")
		f.Serve(w, req.WithContext(apirequest.WithUser(req.Context(), &user.DefaultInfo{Name: "alice"})), set, sub)
	})))
	t.Cleanup(srv.Close)
	return srv
}

// streamEvents answers a watch with the given events (type, object), then
// ends the stream if end, else holds it open until the request ends.
func streamEvents(w http.ResponseWriter, req *http.Request, end bool, events ...[2]string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	for _, e := range events {
		_, _ = fmt.Fprintf(w, "{\"type\":%q,\"object\":%s}\n", e[0], e[1])
		http.NewResponseController(w).Flush()
	}
	if !end {
		<-req.Context().Done()
	}
}

type wireEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// readAll reads a watch answer's events until the stream ends.
func readAll(t *testing.T, resp *http.Response) []wireEvent {
	t.Helper()
	var out []wireEvent
	dec := json.NewDecoder(resp.Body)
	for {
		var e wireEvent
		if err := dec.Decode(&e); err != nil {
			return out
		}
		out = append(out, e)
	}
}

// When one cluster's stream ends, the set's ends with a bookmark that
// holds every cluster's place, so that a client resumes each where it was
// (a reflector otherwise resumes from the last object's resourceVersion,
// one cluster's, and lists again). A cluster that failed to begin keeps
// the place it was asked from.
func TestWatchEndsWithABookmarkOfEveryCluster(t *testing.T) {
	srv := watchSet(t, func(w http.ResponseWriter, req *http.Request, cluster, _ string) {
		switch cluster {
		case "a":
			streamEvents(w, req, true, [2]string{"ADDED", `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","resourceVersion":"15"}}`})
		case "b":
			streamEvents(w, req, false)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":503,"message":"down"}`)
		}
	}, "a", "b", "down")
	from := encodeRV(map[string]string{"a": "5", "b": "6", "down": "9"})
	for _, bookmarks := range []bool{true, false} {
		resp, err := http.Get(srv.URL + "/sets/labels:/proxy/api/v1/pods?watch=true&allowWatchBookmarks=" + strconv.FormatBool(bookmarks) + "&resourceVersion=" + url.QueryEscape(from))
		if err != nil {
			t.Fatal(err)
		}
		evs := readAll(t, resp)
		resp.Body.Close()
		if !bookmarks {
			if len(evs) != 1 || evs[0].Type != "ADDED" {
				t.Errorf("without allowWatchBookmarks: events %v, want the ADDED only", evs)
			}
			continue
		}
		if len(evs) != 2 || evs[0].Type != "ADDED" || evs[1].Type != "BOOKMARK" {
			t.Fatalf("events %v, want ADDED then a BOOKMARK", evs)
		}
		var o struct {
			Kind, APIVersion string
			Metadata         metav1.ObjectMeta
		}
		if err := json.Unmarshal(evs[1].Object, &o); err != nil {
			t.Fatal(err)
		}
		if o.Kind != "Pod" || o.APIVersion != "v1" {
			t.Errorf("bookmark %s: want kind Pod, v1 (client-go decodes it as the watched type)", evs[1].Object)
		}
		rvs, _, err := decodeRV(o.Metadata.ResourceVersion)
		if want := map[string]string{"a": "15", "b": "6", "down": "9"}; err != nil || !maps.Equal(rvs, want) {
			t.Errorf("bookmark resourceVersion decodes to %v (%v), want %v", rvs, err, want)
		}
	}
}

// An object's own resourceVersion is one cluster's: a watch from it answers
// 410 Expired, saying to list through the set, and reads no cluster.
func TestWatchFromAnObjectsResourceVersionIsExpired(t *testing.T) {
	var served atomic.Int32
	srv := watchSet(t, func(w http.ResponseWriter, req *http.Request, _, _ string) {
		served.Add(1)
		streamEvents(w, req, true)
	}, "a", "b")
	for _, rv := range []string{"12345", "fo1.not-base64!", "fo1." + base64.RawURLEncoding.EncodeToString([]byte("[1]"))} {
		resp, err := http.Get(srv.URL + "/sets/labels:/proxy/api/v1/pods?watch=true&resourceVersion=" + url.QueryEscape(rv))
		if err != nil {
			t.Fatal(err)
		}
		var st metav1.Status
		_ = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if resp.StatusCode != http.StatusGone || st.Reason != metav1.StatusReasonExpired || !strings.Contains(st.Message, "list through the set") {
			t.Errorf("watch from %q: %d %s %q, want 410 Expired saying to list through the set", rv, resp.StatusCode, st.Reason, st.Message)
		}
	}
	if n := served.Load(); n != 0 {
		t.Errorf("%d cluster requests, want none", n)
	}
}

// A Table watch (kubectl get -w): every row gets the cluster's cell first
// and its object marked, the column definitions come once, with Cluster
// first, and the rest of each event is passed on.
func TestWatchTable(t *testing.T) {
	table := func(name, rv string) string {
		return fmt.Sprintf(`{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":%q},`+
			`"columnDefinitions":[{"name":"Name","type":"string","format":"name","description":"","priority":0}],`+
			`"rows":[{"cells":[%q],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":%q,"resourceVersion":%q}}}]}`, rv, name, name, rv)
	}
	srv := watchSet(t, func(w http.ResponseWriter, req *http.Request, cluster, _ string) {
		if !strings.Contains(req.Header.Get("Accept"), "as=Table") {
			t.Errorf("cluster %s asked with Accept %q, want a Table", cluster, req.Header.Get("Accept"))
		}
		streamEvents(w, req, cluster == "b", [2]string{"ADDED", table("p-"+cluster, "3")}, [2]string{"MODIFIED", table("p-"+cluster, "4")})
	}, "a", "b")
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/sets/labels:/proxy/api/v1/pods?watch=true", nil)
	req.Header.Set("Accept", "application/json;as=Table;g=meta.k8s.io;v=v1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	evs := readAll(t, resp)
	if len(evs) < 2 {
		t.Fatalf("events %v", evs)
	}
	for i, e := range evs {
		var tb metav1.Table
		if err := json.Unmarshal(e.Object, &tb); err != nil {
			t.Fatalf("event %d: %v\n%s", i, err, e.Object)
		}
		if tb.Kind != "Table" || tb.ResourceVersion == "" {
			t.Errorf("event %d: kind %q resourceVersion %q, want the cluster's", i, tb.Kind, tb.ResourceVersion)
		}
		switch {
		case i == 0 && (len(tb.ColumnDefinitions) != 2 || tb.ColumnDefinitions[0].Name != "Cluster" || tb.ColumnDefinitions[1].Name != "Name"):
			t.Errorf("first event's columns %v, want Cluster, Name", tb.ColumnDefinitions)
		case i > 0 && len(tb.ColumnDefinitions) != 0:
			t.Errorf("event %d repeats the columns", i)
		}
		if len(tb.Rows) != 1 || len(tb.Rows[0].Cells) != 2 {
			t.Fatalf("event %d rows %+v", i, tb.Rows)
		}
		c := tb.Rows[0].Cells[0].(string)
		var o metav1.PartialObjectMetadata
		if err := json.Unmarshal(tb.Rows[0].Object.Raw, &o); err != nil {
			t.Fatal(err)
		}
		if tb.Rows[0].Cells[1] != "p-"+c || o.Name != "p-"+c || o.Annotations[ClusterAnnotation] != c {
			t.Errorf("event %d row %v object %v, want the cluster's cell first and its object marked", i, tb.Rows[0].Cells, o.ObjectMeta)
		}
	}
}

// tableEventByMaps is how Table events were marked before the splice:
// decoded into maps and encoded again. TestTableEventMeansWhatMapsMeant
// holds the splice to it.
func tableEventByMaps(obj json.RawMessage, cluster string, headers bool) ([]byte, error) {
	var t map[string]json.RawMessage
	if err := json.Unmarshal(obj, &t); err != nil {
		return nil, err
	}
	var cols []metav1.TableColumnDefinition
	if c, ok := t["columnDefinitions"]; ok {
		if err := json.Unmarshal(c, &cols); err != nil {
			return nil, err
		}
	}
	if headers {
		t["columnDefinitions"], _ = json.Marshal(append([]metav1.TableColumnDefinition{clusterColumn}, cols...))
	} else {
		delete(t, "columnDefinitions")
	}
	var rows []row
	if r, ok := t["rows"]; ok {
		if err := json.Unmarshal(r, &rows); err != nil {
			return nil, err
		}
	}
	name, _ := json.Marshal(cluster)
	for i := range rows {
		rows[i].Cells = append([]json.RawMessage{name}, rows[i].Cells...)
		if len(rows[i].Object) > 0 && string(rows[i].Object) != "null" {
			if b, err := annotate(rows[i].Object, cluster); err == nil {
				rows[i].Object = b
			}
		}
	}
	var err error
	t["rows"], err = json.Marshal(rows)
	if err != nil {
		return nil, err
	}
	return json.Marshal(t)
}

func TestTableEventMeansWhatMapsMeant(t *testing.T) {
	// Two seeds find faults of the maps' own, not differences of meaning,
	// and are left out where they do: "null" decodes to a nil map, which
	// the maps then write into (a panic); and without headers the maps
	// decode the column definitions they then drop, refusing ones that are
	// not definitions, which the walk drops unread. The walk is held to the
	// decoder on these too (TestTableEventWalkMeansWhatTheDecoderMeant).
	mapsFault := func(in string, headers bool) bool {
		return in == `null` || (!headers && in == `{"kind":"Table","columnDefinitions":[1]}`)
	}
	for _, in := range tableSeeds() {
		for _, headers := range []bool{true, false} {
			if mapsFault(in, headers) {
				continue
			}
			got, err := tableEvent(json.RawMessage(in), "c-1", headers)
			want, werr := tableEventByMaps(json.RawMessage(in), "c-1", headers)
			if (err != nil) != (werr != nil) {
				t.Errorf("%s (headers %v): error %v, by maps %v", in, headers, err, werr)
				continue
			}
			if err != nil {
				continue
			}
			var g, w any
			if json.Unmarshal(got, &g) != nil || json.Unmarshal(want, &w) != nil || !reflect.DeepEqual(g, w) {
				t.Errorf("%s (headers %v):\n got %s\nwant %s", in, headers, got, want)
			}
		}
	}
	if _, err := tableEvent(json.RawMessage(`{"rows":[`), "c", true); err == nil {
		t.Error("a cut Table was accepted")
	}
}
