package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxPageBytes bounds what the gateway holds of one page of one cluster.
const maxPageBytes = 256 << 20

const (
	acceptJSON  = "application/json"
	acceptTable = "application/json;as=Table;v=v1;g=meta.k8s.io"
)

// wantsTable tells whether the client asks for a Table (kubectl get does).
func wantsTable(req *http.Request) bool {
	return strings.Contains(req.Header.Get("Accept"), "as=Table")
}

// page is one page of one cluster's list (or its one object, for a get),
// its items already marked with the cluster.
type page struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	Metadata   struct {
		ResourceVersion string `json:"resourceVersion"`
		Continue        string `json:"continue"`
	} `json:"metadata"`
	ColumnDefinitions []metav1.TableColumnDefinition `json:"columnDefinitions"`

	// items are the page's items (a Table's rows, with the cluster cell
	// first and in the page's own column order), comma-separated JSON.
	items []byte
	n     int
	// irregular: a row's cells do not match the page's columns; the rows
	// are placed one by one when written.
	irregular bool
}

type row struct {
	Cells      []json.RawMessage `json:"cells"`
	Conditions json.RawMessage   `json:"conditions,omitempty"`
	Object     json.RawMessage   `json:"object,omitempty"`
}

func (p *page) isList() bool { return p.Kind == "Table" || strings.HasSuffix(p.Kind, "List") }

// result is one page of one cluster, or its failure.
type result struct {
	cluster  string
	page     *page
	err      string // a warning's text
	notFound bool   // a get the cluster answered 404
	first    bool
}

// list lists across clusters: every cluster's first page is read (at most
// MaxClusters at once) before the answer begins, so that each failing
// cluster becomes a Warning header; then the pages stream in the order they
// arrive, each cluster paged by the gateway (the client's limit, or
// DefaultPageSize), so the gateway holds at most a page per cluster.
func (f *FanOut) list(w http.ResponseWriter, req *http.Request, clusters []string, subpath string, get bool) {
	q := req.URL.Query()
	if q.Get("continue") != "" {
		writeStatus(w, req, apierrors.NewBadRequest("continue is not served through a set of clusters yet: ask without it; the gateway reads each cluster in pages itself and answers with the whole list"))
		return
	}
	rvs, all, err := decodeRV(q.Get("resourceVersion"))
	if err != nil {
		writeStatus(w, req, apierrors.NewResourceExpired(err.Error()+"; list again without a resourceVersion"))
		return
	}
	if !get && q.Get("limit") == "" {
		q.Set("limit", strconv.Itoa(DefaultPageSize))
	}
	table := wantsTable(req)
	accept := acceptJSON
	if table {
		accept = acceptTable
	}

	ctx, cancel := context.WithCancel(req.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	results := make(chan result)
	begun := make(chan struct{})
	slots := make(chan struct{}, max(1, f.opts.MaxClusters))
	if f.opts.MaxClusters <= 0 {
		slots = make(chan struct{}, max(1, len(clusters)))
	}
	for _, c := range clusters {
		cq := cloneValues(q)
		if !all {
			cq.Set("resourceVersion", rvs[c]) // a cluster new to the set: its most recent
			if rvs[c] == "" {
				cq.Del("resourceVersion")
				cq.Del("resourceVersionMatch")
			}
		}
		wg.Go(func() { f.readCluster(ctx, req, c, subpath, cq, accept, get, slots, results, begun) })
	}

	// Every cluster's first page, or its failure.
	firsts := make([]result, 0, len(clusters))
	for range clusters {
		select {
		case r := <-results:
			firsts = append(firsts, r)
		case <-ctx.Done():
			return
		}
	}
	out := &listWriter{w: w, table: table, rvs: map[string]string{}}
	failed, more := 0, 0
	var notFound bool
	for _, r := range firsts {
		switch {
		case r.notFound:
			notFound = true
		case r.err != "":
			failed++
			warn(req.Context(), r.cluster, r.err)
		default:
			out.rvs[r.cluster] = r.page.Metadata.ResourceVersion
			if r.page.Metadata.Continue != "" {
				more++
			}
		}
	}
	switch {
	case len(out.rvs) == 0 && failed > 0:
		writeStatus(w, req, apierrors.NewServiceUnavailable(fmt.Sprintf("no cluster of the set answered (%d failed; the warnings say why)", failed)))
		return
	case len(out.rvs) == 0 && get && notFound:
		in, _ := innerInfo(req, subpath)
		writeStatus(w, req, apierrors.NewNotFound(schemaGR(in.APIGroup, in.Resource), in.Name))
		return
	}
	for _, r := range firsts {
		if r.page != nil {
			out.kindFrom(r.page)
		}
	}
	out.begin()
	close(begun)
	for _, r := range firsts {
		if r.page != nil {
			out.page(r.cluster, r.page)
			r.page.release()
		}
	}
	out.flush()
	for more > 0 {
		var r result
		select {
		case r = <-results:
		case <-ctx.Done():
			return
		}
		if r.err != "" {
			// The answer has begun: a cluster that fails now cannot be a
			// warning, and a list that misses its pages must not look
			// complete. The client's read fails; it lists again.
			panic(http.ErrAbortHandler)
		}
		out.page(r.cluster, r.page)
		r.page.release()
		out.flush()
		if r.page.Metadata.Continue == "" {
			more--
		}
	}
	out.end()
}

// readCluster reads one cluster's pages into results; pages after the first
// wait until the answer has begun.
func (f *FanOut) readCluster(ctx context.Context, req *http.Request, cluster, subpath string, q url.Values, accept string, get bool,
	slots chan struct{}, results chan<- result, begun <-chan struct{}) {
	for first := true; ; first = false {
		if !first {
			select {
			case <-begun:
			case <-ctx.Done():
				return
			}
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		r := f.readPage(ctx, req, cluster, subpath, q.Encode(), accept, get)
		<-slots
		r.first = first
		select {
		case results <- r:
		case <-ctx.Done():
			return
		}
		if r.page == nil || r.page.Metadata.Continue == "" {
			return
		}
		q.Set("continue", r.page.Metadata.Continue)
		q.Del("resourceVersion") // the token holds it
		q.Del("resourceVersionMatch")
	}
}

func (f *FanOut) readPage(ctx context.Context, req *http.Request, cluster, subpath, rawQuery, accept string, get bool) result {
	if t := f.opts.ClusterTimeout; t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	a := f.open(ctx, req, cluster, subpath, rawQuery, accept, 0)
	defer a.close()
	if a.code != http.StatusOK && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// The proxy answers 504 at the deadline (the per-cluster one, here):
		// say which bound it was.
		return result{cluster: cluster, err: timedOut(f.opts.ClusterTimeout)}
	}
	if a.code != http.StatusOK {
		if a.code == 0 {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return result{cluster: cluster, err: timedOut(f.opts.ClusterTimeout)}
			}
			return result{cluster: cluster, err: "its answer ended before it began"}
		}
		msg, _ := a.failure(f.opts.ClusterTimeout)
		return result{cluster: cluster, err: msg, notFound: get && a.code == http.StatusNotFound}
	}
	p, err := decodeBody(a.body, cluster, get && accept != acceptTable)
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return result{cluster: cluster, err: timedOut(f.opts.ClusterTimeout)}
	case err != nil:
		return result{cluster: cluster, err: err.Error()}
	}
	return result{cluster: cluster, page: p}
}

var errPageTooLarge = fmt.Errorf("one page of its answer is over %d MiB: ask with a smaller limit", maxPageBytes>>20)

// pageLimit fails a read past maxPageBytes.
type pageLimit struct {
	r io.Reader
	n int64
}

func (l *pageLimit) Read(b []byte) (int, error) {
	if l.n <= 0 {
		return 0, errPageTooLarge
	}
	if int64(len(b)) > l.n {
		b = b[:l.n]
	}
	k, err := l.r.Read(b)
	l.n -= int64(k)
	return k, err
}

// decodeBody reads one cluster's page, marking each item with cluster; its
// error is a warning's text. A List or Table is read as a stream, one item
// (or row) at a time, so that the gateway holds about the page itself;
// whole (a get's object, not as a Table) is read at once.
func decodeBody(body io.Reader, cluster string, whole bool) (*page, error) {
	body = &pageLimit{r: body, n: maxPageBytes + 1}
	m := newMark(cluster)
	p := &page{items: takeBuffer()}
	if whole {
		b, err := io.ReadAll(body)
		if err != nil {
			return nil, readError(err)
		}
		if err := json.Unmarshal(b, p); err != nil {
			return nil, readError(err)
		}
		if b, err := appendAnnotated(p.items, b, m); err == nil {
			p.items, p.n = b, 1
		}
		return p, nil
	}
	if err := p.decode(json.NewDecoder(body), m); err != nil {
		p.release()
		return nil, readError(err)
	}
	if !p.isList() {
		p.release()
		return nil, fmt.Errorf("its answer is a %q, not a list or Table", p.Kind)
	}
	return p, nil
}

// buffers hold pages' items: a list of many pages reuses a few.
var buffers sync.Pool

// maxPooled: a larger buffer (a cluster asked a large limit) is left to
// the collector rather than kept.
const maxPooled = 16 << 20

func takeBuffer() []byte {
	if b, ok := buffers.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return nil
}

// release gives p's buffer back once p is written; its items are not read after.
func (p *page) release() {
	if b := p.items; cap(b) > 0 && cap(b) <= maxPooled {
		buffers.Put(&b)
	}
	p.items = nil
}

func readError(err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, errPageTooLarge):
		return err
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("its answer ended before its JSON did")
	case errors.As(err, &syntax), errors.As(err, &typ), errors.Is(err, errNotList):
		return fmt.Errorf("its answer is not JSON: %w", err)
	}
	return fmt.Errorf("reading its answer: %w", err)
}

var errNotList = errors.New("not a JSON object of a List or Table")

// decode reads a List or Table from dec: its items and rows one at a time,
// each into one reused buffer, then spliced onto p.items.
func (p *page) decode(dec *json.Decoder, m mark) error {
	if t, err := dec.Token(); err != nil {
		return err
	} else if t != json.Delim('{') {
		return errNotList
	}
	var skip, raw json.RawMessage
	var r row
	cells := -1 // every row's cells (columns may come after the rows)
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		switch t {
		case "kind":
			err = dec.Decode(&p.Kind)
		case "apiVersion":
			err = dec.Decode(&p.APIVersion)
		case "metadata":
			err = dec.Decode(&p.Metadata)
		case "columnDefinitions":
			err = dec.Decode(&p.ColumnDefinitions)
		case "items":
			err = eachElement(dec, func() error {
				if err := dec.Decode(&raw); err != nil {
					return err
				}
				p.add(func(b []byte) ([]byte, error) { return appendAnnotated(b, raw, m) })
				return nil
			})
		case "rows":
			err = eachElement(dec, func() error {
				r.Cells, r.Conditions, r.Object = r.Cells[:0], r.Conditions[:0], r.Object[:0]
				if err := dec.Decode(&r); err != nil {
					return err
				}
				if cells >= 0 && cells != len(r.Cells) {
					p.irregular = true
				}
				cells = len(r.Cells)
				p.add(func(b []byte) ([]byte, error) { return appendRow(b, m.value, r.Cells, r.Conditions, r.Object, &m), nil })
				return nil
			})
		default:
			err = dec.Decode(&skip)
		}
		if err != nil {
			return err
		}
	}
	_, err := dec.Token() // '}'
	if cells >= 0 && cells != len(p.ColumnDefinitions) {
		p.irregular = true
	}
	return err
}

// add appends one item; an item that cannot be marked is left out, as the
// fan-out always has (it is not an object).
func (p *page) add(appendItem func([]byte) ([]byte, error)) {
	mark := len(p.items)
	if p.n > 0 {
		p.items = append(p.items, ',')
	}
	if cap(p.items)-len(p.items) < 4<<10 {
		// Doubled: append's growth of a large slice (1.25x) would
		// allocate about five pages to hold one.
		p.items = slices.Grow(p.items, max(len(p.items), 64<<10))
	}
	b, err := appendItem(p.items)
	if err != nil {
		p.items = p.items[:mark]
		return
	}
	p.items = b
	p.n++
}

// eachElement calls each for every element of the array dec is at (null:
// none).
func eachElement(dec *json.Decoder, each func() error) error {
	t, err := dec.Token()
	switch {
	case err != nil:
		return err
	case t == nil:
		return nil
	case t != json.Delim('['):
		return errNotList
	}
	for dec.More() {
		if err := each(); err != nil {
			return err
		}
	}
	_, err = dec.Token() // ']'
	return err
}

// appendRow appends a Table row with the cell first (the cluster's) first,
// and its object marked with m (nil: as it is).
func appendRow(dst, first []byte, cells []json.RawMessage, conditions, object []byte, m *mark) []byte {
	dst = append(dst, `{"cells":[`...)
	dst = append(dst, first...)
	for _, c := range cells {
		dst = append(dst, ',')
		dst = append(dst, c...)
	}
	dst = append(dst, ']')
	if len(conditions) > 0 {
		dst = append(dst, `,"conditions":`...)
		dst = append(dst, conditions...)
	}
	if len(object) > 0 {
		dst = append(dst, `,"object":`...)
		if m == nil || string(object) == "null" {
			dst = append(dst, object...)
		} else {
			if b, err := appendAnnotated(dst, object, *m); err == nil {
				dst = b
			} else {
				dst = append(dst, object...) // as it came, as the fan-out always has
			}
		}
	}
	return append(dst, '}')
}

func cloneValues(v url.Values) url.Values {
	out := make(url.Values, len(v))
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	return out
}
