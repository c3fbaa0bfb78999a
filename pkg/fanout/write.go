package fanout

import (
	"encoding/json"
	"net/http"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/features"
)

func schemaGR(group, resource string) schema.GroupResource {
	return schema.GroupResource{Group: group, Resource: resource}
}

// clusterColumn is the column a set's Table starts with.
var clusterColumn = metav1.TableColumnDefinition{Name: "Cluster", Type: "string",
	Description: "The ClusterGateway the row was read through (annotation " + ClusterAnnotation + ")."}

// listWriter writes one List or Table as its pages come: the items first,
// the column definitions and metadata (the set's resourceVersion) last,
// which JSON allows and which lets rows go out before every cluster is read.
type listWriter struct {
	w     http.ResponseWriter
	gz    *gzipStream // the answer's compression (nil: none)
	table bool
	kind  string
	apiV  string
	rvs   map[string]string
	cont  string // the set's continue token ("": the list is complete)
	n     int    // items written
	cols  []metav1.TableColumnDefinition
	err   error
}

// kindFrom takes the list's kind from the first list page.
func (l *listWriter) kindFrom(p *page) {
	if l.kind != "" || l.table || !p.isList() {
		return
	}
	l.kind, l.apiV = p.Kind, p.APIVersion
}

func (l *listWriter) write(b []byte) {
	switch {
	case l.err != nil:
	case l.gz != nil:
		_, l.err = l.gz.Write(b)
	default:
		_, l.err = l.w.Write(b)
	}
}

// gzipThreshold is the generic API server's: it compresses an answer whose
// first write (a kube-apiserver's list buffers that much) is larger.
const gzipThreshold = 128 << 10

// acceptsGzip tells whether the answer to req may be compressed, as the
// generic API server decides it (Accept-Encoding, APIResponseCompression).
func acceptsGzip(req *http.Request) bool {
	return responsewriters.ContentEncodingSupported(req, features.APIResponseCompression) == "gzip"
}

// begin writes the answer's status and head; compressed, with gzip (at the
// generic API server's level), for a client that accepts it.
func (l *listWriter) begin(compressed bool) {
	if compressed {
		l.w.Header().Set("Content-Encoding", "gzip")
		l.w.Header().Add("Vary", "Accept-Encoding")
	}
	l.w.Header().Set("Content-Type", "application/json")
	l.w.WriteHeader(http.StatusOK)
	if compressed {
		// After the header: the gzip header written before it would make
		// the server sniff the Content-Type (application/x-gzip).
		l.gz = newGzipStream(l.w)
	}
	if l.table {
		l.write([]byte(`{"kind":"Table","apiVersion":"meta.k8s.io/v1","rows":[`))
		return
	}
	if l.kind == "" {
		l.kind, l.apiV = "List", "v1"
	}
	head, _ := json.Marshal(struct {
		Kind       string `json:"kind"`
		APIVersion string `json:"apiVersion"`
	}{l.kind, l.apiV})
	l.write(head[:len(head)-1])
	l.write([]byte(`,"items":[`))
}

// block writes n items, comma-separated.
func (l *listWriter) block(b []byte, n int) { l.blockOf(b, nil, n) }

// blockOf is block, with b compressed alone as seg (nil: none).
func (l *listWriter) blockOf(b, seg []byte, n int) {
	if n == 0 {
		return
	}
	if l.n > 0 {
		l.write([]byte{','})
	}
	l.n += n
	if l.gz != nil && seg != nil {
		if l.err == nil {
			l.err = l.gz.segment(b, seg)
		}
		return
	}
	l.write(b)
}

func (l *listWriter) page(cluster string, p *page) {
	if l.table {
		l.rows(cluster, p)
		return
	}
	l.blockOf(p.items, p.gz, p.n)
}

// rows writes a Table page's rows with the cluster first. The first page
// written defines the columns; a cluster whose columns differ (another
// version) has its cells placed by column name.
func (l *listWriter) rows(cluster string, p *page) {
	if l.cols == nil {
		l.cols = append([]metav1.TableColumnDefinition{clusterColumn}, p.ColumnDefinitions...)
	}
	place := columnPlaces(l.cols[1:], p.ColumnDefinitions)
	if !p.irregular && len(place) == len(l.cols)-1 && inOrder(place) {
		l.blockOf(p.items, p.gz, p.n) // the same columns: the rows as they were stored
		return
	}
	var rows []row
	if err := json.Unmarshal(append(append([]byte{'['}, p.items...), ']'), &rows); err != nil {
		return
	}
	name, _ := json.Marshal(cluster)
	var b []byte
	for _, r := range rows {
		cells := make([]json.RawMessage, len(l.cols)-1)
		for i := range cells {
			cells[i] = json.RawMessage(`""`)
		}
		for i, c := range r.Cells[min(1, len(r.Cells)):] { // [0] is the cluster's
			if i < len(place) && place[i] >= 0 {
				cells[place[i]] = c
			}
		}
		// The object was marked as the page was read.
		b = appendRow(b[:0], name, cells, r.Conditions, r.Object, nil)
		l.block(b, 1)
	}
}

// columnPlaces maps each of a page's columns to its place among cols (-1:
// none).
func columnPlaces(cols, page []metav1.TableColumnDefinition) []int {
	out := make([]int, len(page))
	for i, c := range page {
		out[i] = slices.IndexFunc(cols, func(d metav1.TableColumnDefinition) bool { return d.Name == c.Name })
	}
	return out
}

// inOrder tells whether each column is in its own place.
func inOrder(place []int) bool {
	for i, p := range place {
		if p != i {
			return false
		}
	}
	return true
}

// flush sends what was written: the rows so far reach the client.
func (l *listWriter) flush() {
	if l.err == nil && l.gz != nil {
		l.err = l.gz.Flush()
	}
	if l.err == nil {
		_ = http.NewResponseController(l.w).Flush()
	}
}

func (l *listWriter) end() {
	l.write([]byte{']'})
	if l.table {
		cols := l.cols
		if cols == nil {
			cols = []metav1.TableColumnDefinition{clusterColumn}
		}
		b, _ := json.Marshal(cols)
		l.write([]byte(`,"columnDefinitions":`))
		l.write(b)
	}
	meta, _ := json.Marshal(metav1.ListMeta{ResourceVersion: encodeRV(l.rvs), Continue: l.cont})
	l.write([]byte(`,"metadata":`))
	l.write(meta)
	l.write([]byte("}\n"))
	if l.gz != nil && l.err == nil {
		l.err = l.gz.Close()
	}
}

// editMeta changes obj's metadata with edit.
func editMeta(obj json.RawMessage, edit func(map[string]json.RawMessage) error) ([]byte, error) {
	var o map[string]json.RawMessage
	if err := json.Unmarshal(obj, &o); err != nil {
		return nil, err
	}
	if o == nil {
		return nil, errNotObject // null: a nil map, which would panic below
	}
	var meta map[string]json.RawMessage
	if m, ok := o["metadata"]; ok {
		if err := json.Unmarshal(m, &meta); err != nil {
			return nil, err
		}
	}
	if meta == nil {
		meta = map[string]json.RawMessage{}
	}
	if err := edit(meta); err != nil {
		return nil, err
	}
	m, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}
	o["metadata"] = m
	return json.Marshal(o)
}
