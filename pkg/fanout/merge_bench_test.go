package fanout

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// discard is a ResponseWriter that keeps nothing: the benchmark measures
// the merge, not a recorder's buffer.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) WriteHeader(int)             {}
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }

// benchPages are n pages of m ConfigMaps of about 1 KiB each, as a
// kube-apiserver answers a list (or a Table with the objects' metadata).
func benchPages(n, m int, table bool) [][]byte {
	data := strings.Repeat("x", 900)
	pages := make([][]byte, n)
	for p := range pages {
		var b bytes.Buffer
		if table {
			b.WriteString(`{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"12","continue":"c"},"columnDefinitions":[{"name":"Name","type":"string","format":"name","description":"","priority":0},{"name":"Data","type":"string","format":"","description":"","priority":0},{"name":"Age","type":"string","format":"","description":"","priority":0}],"rows":[`)
		} else {
			b.WriteString(`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"12","continue":"c"},"items":[`)
		}
		for i := range m {
			if i > 0 {
				b.WriteByte(',')
			}
			name := fmt.Sprintf("cm-%d-%d", p, i)
			if table {
				fmt.Fprintf(&b, `{"cells":[%q,1,"5m"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":%q,"namespace":"default","uid":"0b0c6c2e-8f7a-4c4e-9d7b-%012d","resourceVersion":"%d","creationTimestamp":"2026-12-05T10:00:00Z","labels":{"app":"bench"},"annotations":{"note":%q},"managedFields":[]}}}`, name, name, i, 100+i, data[:700])
			} else {
				fmt.Fprintf(&b, `{"metadata":{"name":%q,"namespace":"default","uid":"0b0c6c2e-8f7a-4c4e-9d7b-%012d","resourceVersion":"%d","creationTimestamp":"2026-12-05T10:00:00Z","labels":{"app":"bench"}},"data":{"d":%q}}`, name, i, 100+i, data)
			}
		}
		b.WriteString(`]}`)
		pages[p] = b.Bytes()
	}
	return pages
}

// mergePages decodes and writes pages as the set's list does, each page
// read from its own cluster's body.
func mergePages(w http.ResponseWriter, pages [][]byte, table bool) error {
	out := &listWriter{w: w, table: table, rvs: map[string]string{}}
	out.begin(false)
	for i, b := range pages {
		c := fmt.Sprintf("cluster-%d", i)
		p, err := decodeBody(bytes.NewReader(b), c, false)
		if err != nil {
			return err
		}
		out.rvs[c] = p.Metadata.ResourceVersion
		out.page(c, p)
		p.release()
	}
	out.end()
	return out.err
}

// BenchmarkMergePages merges 10 pages of 500 items of about 1 KiB (B/op
// and allocs/op are what the gateway allocates per merged list).
func BenchmarkMergePages(b *testing.B) {
	for _, table := range []bool{false, true} {
		name := "List"
		if table {
			name = "Table"
		}
		b.Run(name, func(b *testing.B) {
			pages := benchPages(10, 500, table)
			size := 0
			for _, p := range pages {
				size += len(p)
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			w := &discard{h: http.Header{}}
			for b.Loop() {
				if err := mergePages(w, pages, table); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
