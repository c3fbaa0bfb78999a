package fanout

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
)

// getEncoded GETs path asking accept-encoding itself (so that the client
// does not undo a compression): the answer's Content-Encoding and body as
// it came.
func (fx *fixture) getEncoded(t *testing.T, path, acceptEncoding string) (string, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, fx.srv.URL+path, nil)
	if acceptEncoding != "" {
		req.Header.Set("Accept-Encoding", acceptEncoding)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d (%v): %s", resp.StatusCode, err, b)
	}
	// client-go picks its decoder by the Content-Type, compressed or not.
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q (Content-Encoding %q), want application/json", ct, resp.Header.Get("Content-Encoding"))
	}
	return resp.Header.Get("Content-Encoding"), b
}

func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	br := bytes.NewReader(b)
	r, err := gzip.NewReader(br)
	if err != nil {
		t.Fatalf("not gzip: %v", err)
	}
	r.Multistream(false) // one gzip member, as any gzip client reads it
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("gunzip: %v", err)
	}
	if br.Len() != 0 {
		t.Fatalf("%d bytes after the gzip member", br.Len())
	}
	return out
}

// A client that accepts gzip gets a large list compressed, as the generic
// API server (and each kube-apiserver) compresses its own lists: one gzip
// member holding the whole List. A small answer, and one to a client that
// does not accept gzip, is not compressed.
func TestListIsCompressedForAClientThatAcceptsGzip(t *testing.T) {
	fx := newFixture(t, Config{MaxClusters: 2, PageSize: 300}, map[string]*cluster{"a": {pods: 1000}, "b": {pods: 700}, "c": {pods: 1}})
	want := map[string]int{"a": 1000, "b": 700}
	check := func(what string, body []byte) {
		t.Helper()
		l := decode(t, body)
		got := map[string]int{}
		for _, it := range l.Items {
			got[it.Metadata.Annotations[ClusterAnnotation]]++
		}
		if len(l.Items) != 1700 || got["a"] != want["a"] || got["b"] != want["b"] {
			t.Errorf("%s: %d items %v, want %v", what, len(l.Items), got, want)
		}
		if l.Metadata.ResourceVersion == "" {
			t.Errorf("%s: no resourceVersion: the end of the answer is missing", what)
		}
	}
	enc, b := fx.getEncoded(t, "/sets/names:a,b/proxy/api/v1/pods", "deflate, gzip")
	if enc != "gzip" {
		t.Fatalf("Content-Encoding %q for a client that accepts gzip, want gzip", enc)
	}
	check("gzip", gunzip(t, b))

	enc, b = fx.getEncoded(t, "/sets/names:a,b/proxy/api/v1/pods", "identity")
	if enc != "" {
		t.Fatalf("Content-Encoding %q for a client that does not accept gzip", enc)
	}
	check("identity", b)

	// One small cluster: the whole answer is read before it begins, and is
	// under the generic server's threshold.
	enc, b = fx.getEncoded(t, "/sets/names:c/proxy/api/v1/pods", "gzip")
	if l := decode(t, b); enc != "" || len(l.Items) != 1 {
		t.Errorf("a small answer: Content-Encoding %q, %d items; want it as it is", enc, len(l.Items))
	}
}

// Before the answer begins, each cluster's first read asks a tenth of the
// page (the first rows come after a small read of each cluster, not a
// whole page of every cluster read at once); then the page.
func TestFirstReadIsATenthOfThePage(t *testing.T) {
	var mu sync.Mutex
	var limits []string
	c := &cluster{pods: 25}
	fx := newFixture(t, Config{PageSize: 10}, map[string]*cluster{"a": c})
	serve := fx.f.opts.Serve
	fx.f.opts.Serve = func(w http.ResponseWriter, req *http.Request, cluster, subpath string) {
		mu.Lock()
		limits = append(limits, req.URL.Query().Get("limit"))
		mu.Unlock()
		serve(w, req, cluster, subpath)
	}
	ls := fx.list(t, "/sets/names:a/proxy/api/v1/pods", "")
	if n := len(ls.all.Items); n != 25 || len(ls.pages) != 1 {
		t.Errorf("%d items in %d answers, want 25 in one", n, len(ls.pages))
	}
	if want := []string{"1", "10", "10", "10"}; !slices.Equal(limits, want) {
		t.Errorf("the cluster was read with limits %v, want %v (a tenth of --fanout-page-size first)", limits, want)
	}
}

// A gzipStream of segments compressed alone, writes compressed in the
// stream, flushes and empty pieces is one gzip member that decompresses to
// everything in order, its checksum and size right (gzip.Reader checks
// them).
func TestGzipStreamIsOneMember(t *testing.T) {
	var want, out bytes.Buffer
	g := newGzipStream(&out)
	piece := func(i int) []byte {
		b := bytes.Repeat([]byte(fmt.Sprintf(`{"i":%d,"x":"%x"},`, i, i*7919)), i%50)
		if i%7 == 0 {
			b = append(b, make([]byte, 70<<10)...) // over a deflate window
		}
		return b
	}
	for i := range 300 {
		b := piece(i)
		want.Write(b)
		switch i % 4 {
		case 0:
			if err := g.segment(b, compressSegment(nil, b)); err != nil {
				t.Fatal(err)
			}
		case 1:
			_, _ = g.Write(b)
		case 2:
			_, _ = g.Write(b)
			_ = g.Flush()
		case 3:
			_ = g.segment(nil, nil)
			_, _ = g.Write(b)
		}
	}
	if _, err := g.Write(bytes.Repeat([]byte("y"), maxPending+1)); err != nil {
		t.Fatal(err)
	}
	want.Write(bytes.Repeat([]byte("y"), maxPending+1))
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if got := gunzip(t, out.Bytes()); !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("decompressed %d bytes, want the %d written", len(got), want.Len())
	}
}
