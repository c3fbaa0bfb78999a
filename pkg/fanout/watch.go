package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// event is one watch event of one cluster, as the fan-out passes it on.
type event struct {
	cluster string
	Type    string          `json:"type"`
	Object  json.RawMessage `json:"object"`
	rv      string
	end     string // the cluster's stream ended: why (nil event otherwise)
	kind    typeMeta
}

// sendsInitialEvents is whether q asks a watch-list (sendInitialEvents),
// read as kube-apiserver reads a bool parameter: present and neither "0"
// nor "false".
func sendsInitialEvents(q url.Values) bool {
	v, ok := q["sendInitialEvents"]
	return ok && len(v) > 0 && v[0] != "0" && !strings.EqualFold(v[0], "false")
}

// errWatchList refuses a set's watch-list. Its initial events would hold
// objects of the same namespace and name from several clusters, and
// client-go's reflector gathers them in a store keyed by namespace/name
// (whatever the informer's own key), so one cluster's object would hide
// the others'. A 422 makes the reflector fall back to a list and a watch
// from the list's resourceVersion, which keep each cluster's objects.
var errWatchList = apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "ListOptions"}, "", field.ErrorList{
	field.Forbidden(field.NewPath("sendInitialEvents"), "a watch-list is not served through a set of clusters: objects of the same namespace and name on several clusters would be one in client-go's watch-list store; "+
		"list through the set, then watch from the list's resourceVersion (client-go's reflector does this by itself after this error)"),
})

// watch merges every cluster's watch. Each cluster's watch must begin
// (within ClusterTimeout) before the answer does, so that each failing
// cluster becomes a Warning header and a 410 of any cluster is the set's
// 410. Then events pass on as they come, each object marked with its
// cluster; a bookmark carries the set's resourceVersion, which resumes every
// cluster. When one cluster's stream ends, the set's watch ends (with a
// bookmark of every cluster's place, if the client allows bookmarks), and
// the client watches again from the last resourceVersion it has.
func (f *FanOut) watch(w http.ResponseWriter, req *http.Request, clusters []string, subpath string) {
	q := req.URL.Query()
	if sendsInitialEvents(q) {
		writeStatus(w, req, errWatchList)
		return
	}
	rvs, all, err := decodeRV(q.Get("resourceVersion"))
	if err != nil {
		writeStatus(w, req, apierrors.NewResourceExpired(err.Error()+"; list through the set again, and watch from the list's resourceVersion"))
		return
	}
	bookmarks := q.Get("allowWatchBookmarks") == "true"
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
	// state is where each cluster is: what the set's bookmarks carry. A
	// cluster that fails to begin keeps the place it was asked from, so
	// that a later watch resumes it there (or, if that is too old, answers
	// 410 and the client lists again) instead of starting it afresh and
	// losing its changes in between.
	state := map[string]string{}
	var open []int
	failed := 0
	for i, a := range answers {
		if rv := rvs[clusters[i]]; rv != "" {
			state[clusters[i]] = rv
		}
		if a.code == http.StatusOK {
			open = append(open, i)
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
	var kind typeMeta
	for {
		var ev event
		select {
		case ev = <-events:
		case <-ctx.Done():
			return
		}
		if ev.end != "" {
			// One cluster's stream ended (its timeout, a cut): so does the
			// set's. A last bookmark says where every cluster is, so that
			// the client resumes each there; without it a reflector would
			// resume from the last object's resourceVersion, one cluster's,
			// which the set answers with 410 and a relist.
			if bookmarks && kind.Kind != "" && len(state) > 0 {
				writeBookmark(w, kind, state)
				_ = rc.Flush()
			}
			return
		}
		if ev.rv != "" {
			state[ev.cluster] = ev.rv
		}
		if ev.kind.Kind != "" && ev.Type != "ERROR" {
			kind = ev.kind // a bookmark of the set's own is of the kind the clusters send
		}
		obj := ev.Object
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

// writeBookmark writes a BOOKMARK event whose object is of kind (with
// apiVersion: client-go decodes a bookmark's object into the watched type)
// and has the set's state as its resourceVersion.
func writeBookmark(w http.ResponseWriter, kind typeMeta, state map[string]string) {
	type meta struct {
		ResourceVersion string `json:"resourceVersion"`
	}
	b, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Object struct {
			typeMeta
			Metadata meta `json:"metadata"`
		} `json:"object"`
	}{Type: "BOOKMARK", Object: struct {
		typeMeta
		Metadata meta `json:"metadata"`
	}{kind, meta{encodeRV(state)}}})
	_, _ = w.Write(append(b, '\n'))
}

// typeMeta is an event object's kind.
type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
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
				typeMeta
				Metadata struct {
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
			}
			if json.Unmarshal(ev.Object, &o) == nil {
				ev.rv = o.Metadata.ResourceVersion
				ev.kind = o.typeMeta
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

// tableEvent is a Table watch event's object with the cluster column: the
// list's walk (scan.go) applied to the event's rows (the cluster's cell
// first, each row's object marked), every other member passed on as the
// cluster wrote it. The column definitions go in the set's first event only
// (headers).
func tableEvent(obj json.RawMessage, cluster string, headers bool) ([]byte, error) {
	w := walkers.Get().(*walker)
	defer func() { w.b = nil; walkers.Put(w) }()
	w.b, w.depth, w.edits = obj, 0, w.edits[:0]
	open := w.ws(0)
	if open >= len(obj) || obj[open] != '{' {
		return nil, errNotObject
	}
	var cols, rows span
	hasCols, hasRows := false, false
	var members []span // key through value, of the members kept as they are
	_, end, err := w.object(open, func(key span, v int) (int, error) {
		e, err := w.value(v)
		switch {
		case err != nil:
		case w.is(key, "columnDefinitions"):
			cols, hasCols = span{v, e}, true
		case w.is(key, "rows"):
			rows, hasRows = span{v, e}, true // the last, as a decoder keeps
		default:
			members = append(members, span{key.start, e})
		}
		return e, err
	})
	if err != nil {
		return nil, err
	}
	if w.ws(end) != len(obj) {
		return nil, errBadJSON
	}
	m := newMark(cluster)
	out := []byte{'{'}
	sep := func() {
		if len(out) > 1 {
			out = append(out, ',')
		}
	}
	for _, mb := range members {
		sep()
		out = append(out, obj[mb.start:mb.end]...)
	}
	if headers {
		var defs []metav1.TableColumnDefinition
		if hasCols && !w.isNull(cols) {
			if err := json.Unmarshal(obj[cols.start:cols.end], &defs); err != nil {
				return nil, err
			}
		}
		b, err := json.Marshal(append([]metav1.TableColumnDefinition{clusterColumn}, defs...))
		if err != nil {
			return nil, err
		}
		sep()
		out = append(append(out, `"columnDefinitions":`...), b...)
	}
	sep()
	if !hasRows || w.isNull(rows) {
		return append(out, `"rows":null}`...), nil
	}
	if obj[rows.start] != '[' {
		return nil, errors.New("its rows are not a JSON array")
	}
	out = append(out, `"rows":[`...)
	n := 0
	_, _, err = w.array(rows.start, func(v int) (int, error) {
		e, _, err := w.row(v, &m)
		if err != nil {
			return 0, err
		}
		if n > 0 {
			out = append(out, ',')
		}
		n++
		out = w.applyEdits(out, v, e)
		return e, nil
	})
	if err != nil {
		return nil, err
	}
	return append(out, "]}"...), nil
}
