package fanout

import (
	"compress/flate"
	"encoding/binary"
	"hash/crc32"
	"io"
	"runtime"
	"sync"
)

// gzipStream writes one gzip member (RFC 1952) whose deflate data is a
// series of segments, each compressed alone and ended with a sync flush
// (byte-aligned, not final), as pigz writes one: each cluster's page is
// compressed as it is read, in the reads' goroutines, and the answer only
// appends the segments and keeps the checksum. (A bench of 100 clusters
// found one gzip.Writer in the goroutine that writes the answer took most
// of the list's time.) What is written to it (the answer's head,
// separators, rows placed by column name) is compressed here, at the next
// segment or flush.
type gzipStream struct {
	w       io.Writer
	crc     uint32
	size    uint32
	pending []byte
	err     error
}

// gzipLevel is the generic API server's (responsewriters: the least CPU
// for about the ratio of higher levels).
const gzipLevel = flate.BestSpeed

// maxPending: what is written here is compressed once it is this large.
const maxPending = 256 << 10

func newGzipStream(w io.Writer) *gzipStream {
	g := &gzipStream{w: w}
	// ID1 ID2 CM=deflate FLG=0 MTIME=0 XFL=4 (fastest) OS=255 (unknown),
	// as compress/gzip writes it at this level.
	_, g.err = w.Write([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 255})
	return g
}

func (g *gzipStream) Write(b []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	g.pending = append(g.pending, b...)
	if len(g.pending) >= maxPending {
		g.flushPending()
	}
	return len(b), g.err
}

// segment appends raw, compressed alone as seg (compressSegment).
func (g *gzipStream) segment(raw, seg []byte) error {
	g.flushPending()
	g.add(raw, seg)
	return g.err
}

func (g *gzipStream) add(raw, seg []byte) {
	if g.err != nil || len(raw) == 0 {
		return
	}
	g.crc = crc32.Update(g.crc, crc32.IEEETable, raw)
	g.size += uint32(len(raw)) // RFC 1952: the size modulo 2^32
	_, g.err = g.w.Write(seg)
}

func (g *gzipStream) flushPending() {
	if len(g.pending) == 0 || g.err != nil {
		return
	}
	seg := compressSegment(takeBuffer(), g.pending)
	g.add(g.pending, seg)
	putBuffer(seg)
	g.pending = g.pending[:0]
}

// Flush compresses what was written, so that the writer below can send it.
func (g *gzipStream) Flush() error {
	g.flushPending()
	return g.err
}

// Close ends the deflate data (an empty final block) and writes the
// trailer.
func (g *gzipStream) Close() error {
	g.flushPending()
	if g.err != nil {
		return g.err
	}
	end := []byte{0x03, 0x00, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.LittleEndian.PutUint32(end[2:], g.crc)
	binary.LittleEndian.PutUint32(end[6:], g.size)
	_, g.err = g.w.Write(end)
	return g.err
}

var flateWriters = sync.Pool{New: func() any {
	w, _ := flate.NewWriter(nil, gzipLevel)
	return w
}}

// appender is an io.Writer that appends to b.
type appender struct{ b []byte }

func (a *appender) Write(p []byte) (int, error) {
	a.b = append(a.b, p...)
	return len(p), nil
}

// compressing bounds the segments compressed at once, and so the flate
// writers (about 600 KiB each at this level) the gateway holds, to the
// CPUs: more at once would not compress faster.
var compressing = make(chan struct{}, runtime.GOMAXPROCS(0))

// compressSegment appends raw to dst compressed alone, as deflate blocks
// that end byte-aligned and not final: one segment of a gzipStream.
func compressSegment(dst, raw []byte) []byte {
	compressing <- struct{}{}
	defer func() { <-compressing }()
	fw := flateWriters.Get().(*flate.Writer)
	a := &appender{b: dst}
	fw.Reset(a)
	_, _ = fw.Write(raw) // an appender does not fail
	_ = fw.Flush()
	fw.Reset(io.Discard)
	flateWriters.Put(fw)
	return a.b
}
