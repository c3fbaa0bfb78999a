package fanout

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// event is one watch event of one cluster, as the fan-out passes it on.
type event struct {
	cluster string
	Type    string          `json:"type"`
	Object  json.RawMessage `json:"object"`
	rv      string
	end     string // the cluster's stream ended: why (nil event otherwise)
	// initialEnd is a bookmark that ends the cluster's initial events
	// (sendInitialEvents, client-go's watch-list).
	initialEnd bool
}

// initialEventsEnd is the bookmark annotation that ends a watch's initial
// events (metav1.InitialEventsAnnotationKey).
const initialEventsEnd = metav1.InitialEventsAnnotationKey

// watch merges every cluster's watch. Each cluster's watch must begin
// (within ClusterTimeout) before the answer does, so that each failing
// cluster becomes a Warning header and a 410 of any cluster is the set's
// 410. Then events pass on as they come, each object marked with its
// cluster; a bookmark carries the set's resourceVersion, which resumes every
// cluster. When one cluster's stream ends, the set's watch ends, and the
// client watches again from the last resourceVersion it has.
func (f *FanOut) watch(w http.ResponseWriter, req *http.Request, clusters []string, subpath string) {
	q := req.URL.Query()
	rvs, all, err := decodeRV(q.Get("resourceVersion"))
	if err != nil {
		writeStatus(w, req, apierrors.NewResourceExpired(err.Error()+"; list again, and watch from the list's resourceVersion"))
		return
	}
	table := wantsTable(req)
	accept := acceptJSON
	if table {
		accept = acceptTable
	}
	ctx, cancel := context.WithCancel(req.Context())
	defer cancel()

	answers := make([]*answer, len(clusters))
	var wg sync.WaitGroup
	for i, c := range clusters {
		cq := cloneValues(q)
		if !all {
			if rv := rvs[c]; rv != "" {
				cq.Set("resourceVersion", rv)
			} else {
				cq.Del("resourceVersion") // a cluster new to the set: from its present state
			}
		}
		wg.Go(func() { answers[i] = f.open(ctx, req, c, subpath, cq.Encode(), accept, f.opts.ClusterTimeout) })
	}
	wg.Wait()
	defer func() {
		cancel()
		for _, a := range answers {
			a.close()
		}
	}()
	state := map[string]string{}
	var open []int
	failed := 0
	for i, a := range answers {
		if a.code == http.StatusOK {
			open = append(open, i)
			state[clusters[i]] = rvs[clusters[i]]
			continue
		}
		msg, st := a.failure(f.opts.ClusterTimeout)
		if st != nil && (st.Code == http.StatusGone || st.Reason == metav1.StatusReasonExpired || st.Reason == metav1.StatusReasonGone) {
			writeStatus(w, req, apierrors.NewResourceExpired(fmt.Sprintf("cluster %q: %s; list again, and watch from the list's resourceVersion", clusters[i], st.Message)))
			return
		}
		failed++
		warn(req.Context(), clusters[i], msg)
	}
	if len(open) == 0 && failed > 0 {
		writeStatus(w, req, apierrors.NewServiceUnavailable(fmt.Sprintf("no cluster of the set could be watched (%d failed; the warnings say why)", failed)))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	if len(open) == 0 {
		<-ctx.Done() // an empty set: a watch that sees nothing
		return
	}

	events := make(chan event)
	for _, i := range open {
		wg.Go(func() { readEvents(ctx, clusters[i], answers[i], events) })
	}
	defer wg.Wait()
	defer cancel()  // before the wait: the readers end
	headers := true // a Table watch's column definitions go once, in the first event
	initialDone := map[string]bool{}
	for {
		var ev event
		select {
		case ev = <-events:
		case <-ctx.Done():
			return
		}
		if ev.end != "" {
			return
		}
		if ev.rv != "" {
			state[ev.cluster] = ev.rv
		}
		obj := ev.Object
		if ev.initialEnd {
			// The set's initial events end when every cluster's have: one
			// bookmark then, not one per cluster (a reflector would take
			// the first as the end of all).
			initialDone[ev.cluster] = true
			if len(initialDone) < len(open) {
				continue
			}
		}
		switch {
		case ev.Type == "BOOKMARK":
			obj, err = editMeta(obj, func(meta map[string]json.RawMessage) error {
				meta["resourceVersion"], _ = json.Marshal(encodeRV(state))
				return nil
			})
		case ev.Type == "ERROR":
		case table:
			obj, err = tableEvent(obj, ev.cluster, headers)
			headers = false
		default:
			obj, err = annotate(obj, ev.cluster)
		}
		if err != nil {
			continue
		}
		b, _ := json.Marshal(struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}{ev.Type, obj})
		if _, err := w.Write(append(b, '\n')); err != nil {
			return
		}
		_ = rc.Flush()
		if ev.Type == "ERROR" {
			return // the cluster's watch ended with it (a 410: the client relists)
		}
	}
}

// readEvents decodes one cluster's watch stream into events.
func readEvents(ctx context.Context, cluster string, a *answer, events chan<- event) {
	dec := json.NewDecoder(a.body)
	for {
		ev := event{cluster: cluster}
		if err := dec.Decode(&ev); err != nil {
			ev.end = fmt.Sprintf("cluster %q: %v", cluster, err)
		} else {
			var o struct {
				Metadata struct {
					ResourceVersion string            `json:"resourceVersion"`
					Annotations     map[string]string `json:"annotations"`
				} `json:"metadata"`
			}
			if json.Unmarshal(ev.Object, &o) == nil {
				ev.rv = o.Metadata.ResourceVersion
				ev.initialEnd = ev.Type == "BOOKMARK" && o.Metadata.Annotations[initialEventsEnd] == "true"
			}
		}
		select {
		case events <- ev:
		case <-ctx.Done():
			return
		}
		if ev.end != "" {
			return
		}
	}
}

// tableEvent is a Table watch event's object with the cluster column.
func tableEvent(obj json.RawMessage, cluster string, headers bool) ([]byte, error) {
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
