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
	"time"

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
	// gz is items compressed alone (compressSegment), for an answer in
	// gzip; nil: not compressed.
	gz []byte
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
	code     int    // the failure's HTTP code (0: none came)
	notFound bool   // a get the cluster answered 404

	c     *openCluster
	quota int  // the limit it was read with (a paged list)
	first bool // its first read of this request
}

// list lists across clusters, in one answer or, with limit, in pages that
// a continue token resumes (continue.go). Each cluster is read in pages
// (at most MaxClusters at once), each page of it decoded as a stream.
//
// The answer begins when every cluster's first read has come (or failed),
// or a tenth of the time the first page took after it came (at most
// FirstRowWait): so a slow cluster delays only its own rows, and a cluster
// that fails before then is a Warning header. One that fails after the
// answer began cannot be a header; it stays open in the answer's continue
// token, marked, and the next page reads it before its own answer begins.
// A cluster's 410 (its continue token expired) is the set's 410 Expired.
//
// Without limit, every cluster is read to its end (each paged by the
// gateway, DefaultPageSize). With limit L, one page reads each cluster
// with a share of L (the shares never sum to more than L), and what a
// cluster leaves unused goes to the others; the answer's continue token
// resumes each cluster where its page ended.
func (f *FanOut) list(w http.ResponseWriter, req *http.Request, set string, clusters []string, subpath string, get bool) {
	q := req.URL.Query()
	limit := 0
	if s := q.Get("limit"); s != "" && !get {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			writeStatus(w, req, apierrors.NewBadRequest(fmt.Sprintf("limit %q is not a number", s)))
			return
		}
		limit = int(min(max(n, 0), 1<<30))
	}
	key := tokenKey(set, subpath)
	var st *listToken
	if c := q.Get("continue"); c != "" && !get {
		if rv := q.Get("resourceVersion"); rv != "" && rv != "0" {
			writeStatus(w, req, apierrors.NewBadRequest("specifying resource version is not allowed when using continue"))
			return
		}
		var err error
		if st, err = decodeContinue(c, key); err != nil {
			writeStatus(w, req, apierrors.NewBadRequest(fmt.Sprintf(
				"the continue token is not one this list through clustersets/%s gave: %v; list again without continue", set, err)))
			return
		}
		st.keep(clusters)
	} else {
		rvs, all, err := decodeRV(q.Get("resourceVersion"))
		if err != nil {
			writeStatus(w, req, apierrors.NewResourceExpired(err.Error()+"; list again without a resourceVersion"))
			return
		}
		st = &listToken{Key: key, Match: q.Get("resourceVersionMatch"), RVs: map[string]string{}}
		for _, c := range clusters {
			rv := q.Get("resourceVersion")
			if !all {
				rv = rvs[c] // "": a cluster new to the set, at its most recent
			}
			st.Open = append(st.Open, &openCluster{Name: c, RV: rv})
		}
	}
	for _, k := range []string{"continue", "resourceVersion", "resourceVersionMatch", "limit"} {
		q.Del(k)
	}
	table := wantsTable(req)
	compress := acceptsGzip(req)
	accept := acceptJSON
	if table {
		accept = acceptTable
	}

	ctx, cancel := context.WithCancel(req.Context())
	var wg sync.WaitGroup
	results := make(chan result)
	defer func() { cancel(); wg.Wait() }()

	conc := f.opts.MaxClusters
	if conc <= 0 || conc > len(st.Open) {
		conc = max(1, len(st.Open))
	}
	budget := limit
	// A paged list does not start a read for less than a quarter of a
	// share: many tiny reads would cost more than another page.
	minQuota := max(1, limit/(4*conc))
	var queue []*openCluster
	for _, wait := range []bool{true, false} { // the marked ones first
		for _, c := range st.Open {
			if c.Wait == wait {
				queue = append(queue, c)
			}
		}
	}
	firstPending := len(st.Open) // clusters whose first read has not come
	waitPending := 0             // marked clusters whose read has not come
	for _, c := range st.Open {
		if c.Wait {
			waitPending++
		}
	}
	var deferred []*openCluster // read again once the answer has begun
	begun := false
	inflight := 0
	start := func() {
		for inflight < conc && len(queue) > 0 {
			c := queue[0]
			quota := f.pageSize
			if !begun && !c.read {
				// Before the answer begins, a first page: the answer
				// begins once one has come.
				quota = firstPageSize(f.pageSize)
			}
			if limit > 0 {
				if budget < minQuota {
					return
				}
				quota = max(1, budget/min(len(queue), conc-inflight))
				budget -= quota
			}
			queue = queue[1:]
			inflight++
			cq := cloneValues(q)
			if !get {
				cq.Set("limit", strconv.Itoa(quota))
			}
			switch {
			case c.Continue != "":
				cq.Set("continue", c.Continue)
			case c.RV != "":
				cq.Set("resourceVersion", c.RV)
				if st.Match != "" {
					cq.Set("resourceVersionMatch", st.Match)
				}
			}
			first := !c.read
			c.read = true
			rawQuery := cq.Encode()
			wg.Go(func() {
				r := f.readPage(ctx, req, c.Name, subpath, rawQuery, accept, get, compress)
				r.c, r.quota, r.first = c, quota, first
				select {
				case results <- r:
				case <-ctx.Done():
					if r.page != nil {
						r.page.release()
					}
				}
			})
		}
	}

	out := &listWriter{w: w, table: table, rvs: st.RVs}
	var buffered []*result
	failed, read := 0, 0
	var notFound bool
	// begin starts the answer; false: it answered an error instead.
	begin := func() bool {
		begun = true
		fresh := req.URL.Query().Get("continue") == ""
		if read == 0 && failed > 0 && fresh {
			writeStatus(w, req, apierrors.NewServiceUnavailable(fmt.Sprintf("no cluster of the set answered (%d failed; the warnings say why)", failed)))
			return false
		}
		if read == 0 && get && notFound {
			in, _ := innerInfo(req, subpath)
			writeStatus(w, req, apierrors.NewNotFound(schemaGR(in.APIGroup, in.Resource), in.Name))
			return false
		}
		// Compressed as the generic API server compresses a list: when
		// the client accepts it and the answer is over its threshold, or
		// not all read yet (its size unknown, a list's usually large).
		size := 0
		for _, r := range buffered {
			out.kindFrom(r.page)
			size += len(r.page.items)
		}
		more := len(queue) > 0 || len(deferred) > 0 || inflight > 0
		out.begin(compress && (more || size > gzipThreshold))
		for _, r := range buffered {
			out.page(r.cluster, r.page)
			r.page.release()
		}
		buffered = nil
		out.flush()
		queue = append(queue, deferred...)
		deferred = nil
		return true
	}
	defer func() {
		for _, r := range buffered {
			r.page.release()
		}
	}()

	startedAt := time.Now()
	var timer <-chan time.Time
	waited := false
	for {
		start()
		if !begun && (firstPending == 0 || waited && waitPending == 0 || inflight == 0) {
			if !begin() {
				return
			}
			start() // what waited for the answer to begin
		}
		if inflight == 0 {
			break
		}
		var r result
		select {
		case r = <-results:
		case <-timer:
			timer, waited = nil, true
			continue
		case <-ctx.Done():
			return
		}
		inflight--
		c := r.c
		if r.first {
			firstPending--
			if c.Wait {
				waitPending--
			}
		}
		if r.page == nil {
			budget += r.quota
		}
		switch {
		case r.code == http.StatusGone && !get:
			if !begun {
				again := "list again without continue"
				if req.URL.Query().Get("continue") == "" {
					again = "list again without a resourceVersion" // the set's, from which the cluster's is gone
				}
				writeStatus(w, req, apierrors.NewResourceExpired(fmt.Sprintf(
					"cluster %q: %s; %s", r.cluster, r.err, again)))
				return
			}
			c.Wait = true // the next page answers its 410
		case r.notFound:
			notFound, c.done = true, true
		case r.err != "" && (!begun || get):
			failed++
			c.done = true
			msg := r.err
			if c.Continue != "" {
				msg += " (this list misses its items after those already listed; list again to read them)"
			}
			warn(req.Context(), r.cluster, msg)
		case r.err != "":
			// Too late to be a header: the continue token keeps it.
			c.Wait = true
		default:
			read++
			p := r.page
			if c.Continue == "" {
				st.RVs[c.Name] = p.Metadata.ResourceVersion
			}
			c.Continue, c.RV, c.Wait = p.Metadata.Continue, "", false
			c.done = c.Continue == ""
			if limit > 0 {
				budget += r.quota - p.n
			}
			if begun {
				out.page(r.cluster, p)
				p.release()
				out.flush()
			} else {
				buffered = append(buffered, &r)
				if timer == nil && !waited && !get {
					timer = time.After(min(f.opts.FirstRowWait, time.Since(startedAt)/10))
				}
			}
			switch {
			case c.done:
			case limit == 0 && !begun:
				deferred = append(deferred, c)
			case limit == 0, p.n > 0:
				// A paged list reads it again only if its page had items
				// and the budget allows: each read makes progress.
				queue = append(queue, c)
			}
		}
	}
	out.cont = st.next()
	out.end()
}

// firstPageSize is the page each cluster's first read asks before a list
// without limit begins its answer: a tenth of the gateway's page, so that
// the first rows come after a small read, not a whole page of each
// cluster read at once.
func firstPageSize(pageSize int) int { return max(1, pageSize/10) }

// readPage reads one page of cluster; compress: its items are compressed
// too (in this goroutine), for an answer in gzip.
func (f *FanOut) readPage(ctx context.Context, req *http.Request, cluster, subpath, rawQuery, accept string, get, compress bool) result {
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
		return result{cluster: cluster, err: msg, code: a.code, notFound: get && a.code == http.StatusNotFound}
	}
	p, err := decodeBody(a.body, cluster, get && accept != acceptTable)
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return result{cluster: cluster, err: timedOut(f.opts.ClusterTimeout)}
	case err != nil:
		return result{cluster: cluster, err: err.Error()}
	}
	if compress && !p.irregular && p.n > 0 {
		p.gz = compressSegment(takeBuffer(), p.items)
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
// error is a warning's text. A List or Table is read whole into a reused
// buffer and walked once (scan.go), each item (or row) copied to the
// page's items with its mark; whole (a get's object, not as a Table) is
// one item.
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
	raw, err := readBuffer(body)
	if err == nil {
		// The marked items are about the page's bytes: one allocation
		// rather than doublings, each cleared.
		p.items = slices.Grow(p.items, len(raw)+len(raw)/8)
		w := walkers.Get().(*walker)
		err = p.decodePage(w, raw, &m)
		w.b = nil
		walkers.Put(w)
	}
	putBuffer(raw)
	if err != nil {
		p.release()
		return nil, readError(err)
	}
	if !p.isList() {
		p.release()
		return nil, fmt.Errorf("its answer is a %q, not a list or Table", p.Kind)
	}
	return p, nil
}

var walkers = sync.Pool{New: func() any { return new(walker) }}

// buffers hold pages, as read and as marked: a list of many pages reuses
// a few.
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

func putBuffer(b []byte) {
	if cap(b) > 0 && cap(b) <= maxPooled {
		buffers.Put(&b)
	}
}

// readBuffer reads r to its end into a pooled buffer.
func readBuffer(r io.Reader) ([]byte, error) {
	b := takeBuffer()
	for {
		if len(b) == cap(b) {
			// Doubled: append's growth of a large slice (1.25x) would
			// copy a page about five times to hold it.
			b = slices.Grow(b, max(len(b), 64<<10))
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		switch {
		case errors.Is(err, io.EOF):
			return b, nil
		case err != nil:
			return b, err
		}
	}
}

// release gives p's buffer back once p is written; its items are not read after.
func (p *page) release() {
	putBuffer(p.items)
	putBuffer(p.gz)
	p.items, p.gz = nil, nil
}

func readError(err error) error {
	var syntax *json.SyntaxError
	var walk *syntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, errPageTooLarge):
		return err
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("its answer ended before its JSON did")
	case errors.As(err, &syntax), errors.As(err, &walk), errors.As(err, &typ), errors.Is(err, errNotList):
		return fmt.Errorf("its answer is not JSON: %w", err)
	}
	return fmt.Errorf("reading its answer: %w", err)
}

var errNotList = errors.New("not a JSON object of a List or Table")

// add appends one item with appendItem, comma-separated.
func (p *page) add(appendItem func([]byte) []byte) {
	if p.n > 0 {
		p.items = append(p.items, ',')
	}
	if cap(p.items)-len(p.items) < 4<<10 {
		// Doubled, as readBuffer's.
		p.items = slices.Grow(p.items, max(len(p.items), 64<<10))
	}
	p.items = appendItem(p.items)
	p.n++
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
