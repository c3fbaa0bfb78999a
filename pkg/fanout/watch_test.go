package fanout

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// With sendInitialEvents (client-go's watch-list), each cluster ends its
// initial events with a bookmark; the set sends one, once every cluster has,
// so that a reflector does not take the first cluster's as the end of all.
func TestWatchEndsInitialEventsOnceEveryClusterHas(t *testing.T) {
	fx := newFixture(t, Config{ClusterTimeout: 5 * time.Second}, map[string]*cluster{
		// b's events come well after a's end: a set that passed a's on
		// would end the initial events after one ADDED.
		"a": {events: []string{"ADDED", "END"}}, "b": {events: []string{"ADDED", "ADDED", "END", "MODIFIED"}, delay: 200 * time.Millisecond},
	})
	req, _ := http.NewRequest(http.MethodGet, fx.srv.URL+"/sets/labels:/proxy/api/v1/pods?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var added, ends int
	for sc.Scan() {
		var ev struct {
			Type   string `json:"type"`
			Object struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
			} `json:"object"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		switch {
		case ev.Type == "ADDED":
			added++
		case ev.Type == "BOOKMARK" && ev.Object.Metadata.Annotations[metav1.InitialEventsAnnotationKey] == "true":
			ends++
			if added != 3 {
				t.Errorf("the initial events ended after %d of the 3 ADDED events", added)
			}
			rvs, _, err := decodeRV(ev.Object.Metadata.ResourceVersion)
			if err != nil || rvs["a"] != "201" || rvs["b"] != "202" {
				t.Errorf("its resourceVersion %q decodes to %v (%v), want each cluster at its own end", ev.Object.Metadata.ResourceVersion, rvs, err)
			}
		case ev.Type == "MODIFIED":
			if ends != 1 {
				t.Errorf("%d initial-events-end bookmarks before b's change, want 1", ends)
			}
			return
		}
	}
	t.Fatalf("stream ended: %v", sc.Err())
}
