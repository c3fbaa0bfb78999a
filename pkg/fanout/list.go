package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
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

// page is one page of one cluster's list (or its one object, for a get).
type page struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	Metadata   struct {
		ResourceVersion string `json:"resourceVersion"`
		Continue        string `json:"continue"`
	} `json:"metadata"`
	Items             []json.RawMessage              `json:"items"`
	ColumnDefinitions []metav1.TableColumnDefinition `json:"columnDefinitions"`
	Rows              []row                          `json:"rows"`

	whole json.RawMessage // a get's object
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
	p, err := decodeBody(a.body, cluster, get)
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return result{cluster: cluster, err: timedOut(f.opts.ClusterTimeout)}
	case err != nil:
		return result{cluster: cluster, err: err.Error()}
	}
	return result{cluster: cluster, page: p}
}

var errPageTooLarge = fmt.Errorf("one page of its answer is over %d MiB: ask with a smaller limit", maxPageBytes>>20)

// decodeBody reads one cluster's page; its error is a warning's text.
func decodeBody(body io.Reader, cluster string, get bool) (*page, error) {
	_, _ = cluster, get
	b, err := io.ReadAll(io.LimitReader(body, maxPageBytes+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("reading its answer: %w", err)
	case len(b) > maxPageBytes:
		return nil, errPageTooLarge
	}
	p := new(page)
	if err := json.Unmarshal(b, p); err != nil {
		return nil, fmt.Errorf("its answer is not JSON: %w", err)
	}
	if !p.isList() {
		p.whole = b
	}
	return p, nil
}

func cloneValues(v url.Values) url.Values {
	out := make(url.Values, len(v))
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	return out
}
