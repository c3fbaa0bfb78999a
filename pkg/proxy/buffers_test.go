package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
)

// The body of every proxied response is copied with a buffer the reverse
// proxy borrows and gives back: without the pool each response allocates
// its own 32 KiB, most of the bytes a proxied GET allocated, and so most of
// the gateway's garbage collection (docs/performance.md).
func TestResponsesBorrowTheirCopyBuffer(t *testing.T) {
	body := strings.Repeat("x", 512)
	up := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, body)
	}))
	px := newFixtureProxy(t, tokenSecret("c", up.URL, upstreamCA(up), "t", ""))
	pool, ok := px.reverse.BufferPool.(*copyBuffers)
	if !ok {
		t.Fatalf("the reverse proxy's BufferPool is %T, not the shared copy buffers: every response allocates its own 32 KiB", px.reverse.BufferPool)
	}
	counted := &countingBuffers{BufferPool: pool}
	px.reverse.BufferPool = counted
	const n = 50
	for range n {
		rec := serveAs(px, "c", "/api/v1/namespaces", &user.DefaultInfo{Name: "alice"}, httptest.NewRequest(http.MethodGet, "/", nil))
		if rec.Code != http.StatusOK || rec.Body.String() != body {
			t.Fatalf("got %d %q", rec.Code, rec.Body.String())
		}
	}
	if gets, puts := counted.gets.Load(), counted.puts.Load(); gets != n || puts != n {
		t.Fatalf("%d responses borrowed %d buffers and gave back %d; want each to borrow one and give it back", n, gets, puts)
	}
}

type countingBuffers struct {
	httputil.BufferPool
	gets, puts atomic.Int64
}

func (c *countingBuffers) Get() []byte  { c.gets.Add(1); return c.BufferPool.Get() }
func (c *countingBuffers) Put(b []byte) { c.puts.Add(1); c.BufferPool.Put(b) }

func TestCopyBuffersTakeBackOnlyWhatTheyLent(t *testing.T) {
	b := newCopyBuffers()
	buf := b.Get()
	if len(buf) != copyBufferSize {
		t.Fatalf("lent %d bytes, want %d", len(buf), copyBufferSize)
	}
	b.Put(buf)
	if testing.AllocsPerRun(100, func() { b.Put(b.Get()) }) != 0 {
		t.Fatal("borrowing and giving back a buffer allocates")
	}
	b.Put(make([]byte, 10)) // not lent: dropped, not converted
	b.Put(buf[:100])
	if got := len(b.Get()); got != copyBufferSize {
		t.Fatalf("lent %d bytes after foreign returns, want %d", got, copyBufferSize)
	}
}

// An idle watch holds its copy buffer for as long as it lives: watches
// borrow the small buffers, ordinary requests the 32 KiB ones, and a watch
// event larger than a small buffer still arrives whole.
func TestWatchesBorrowSmallCopyBuffers(t *testing.T) {
	event := `{"type":"ADDED","object":{"data":"` + strings.Repeat("x", 3*watchCopyBufferSize) + `"}}` + "\n"
	up := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") == "true" {
			_, _ = io.WriteString(w, event)
			return
		}
		_, _ = io.WriteString(w, "{}")
	}))
	px := newFixtureProxy(t, tokenSecret("c", up.URL, upstreamCA(up), "t", ""))
	lent := map[string]*sizedBuffers{"ordinary": {BufferPool: px.reverse.BufferPool}, "watch": {BufferPool: px.watches.BufferPool}}
	px.reverse.BufferPool, px.watches.BufferPool = lent["ordinary"], lent["watch"]
	alice := &user.DefaultInfo{Name: "alice"}

	rec := serveAs(px, "c", "/api/v1/namespaces/default/configmaps", alice, httptest.NewRequest(http.MethodGet, "/?watch=true", nil))
	if rec.Code != http.StatusOK || rec.Body.String() != event {
		t.Fatalf("watch: got %d and %d bytes, want 200 and the %d-byte event whole", rec.Code, rec.Body.Len(), len(event))
	}
	rec = serveAs(px, "c", "/api/v1/namespaces/default/configmaps", alice, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("list: got %d", rec.Code)
	}
	for kind, want := range map[string]int{"watch": watchCopyBufferSize, "ordinary": copyBufferSize} {
		if got := lent[kind].sizes(); len(got) != 1 || got[0] != want {
			t.Errorf("the %s request borrowed buffers of %v bytes, want one of %d", kind, got, want)
		}
	}
}

// sizedBuffers notes the length of every buffer it lends.
type sizedBuffers struct {
	httputil.BufferPool
	mu   sync.Mutex
	lens []int
}

func (s *sizedBuffers) Get() []byte {
	b := s.BufferPool.Get()
	s.mu.Lock()
	s.lens = append(s.lens, len(b))
	s.mu.Unlock()
	return b
}

func (s *sizedBuffers) sizes() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.lens)
}
