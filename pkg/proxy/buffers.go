package proxy

import "sync"

// copyBufferSize is httputil.ReverseProxy's own body-copy buffer size.
const copyBufferSize = 32 << 10

// copyBuffers lends the reverse proxy its body-copy buffers. Without a
// BufferPool, httputil.ReverseProxy allocates a fresh 32 KiB buffer for every
// response: about two thirds of the bytes the gateway allocated per proxied
// GET (docs/performance.md), and so most of its garbage collection.
// A response holds its buffer while it streams (a watch for its lifetime),
// as it did before; a finished one gives it back.
type copyBuffers struct{ pool sync.Pool }

func newCopyBuffers() *copyBuffers {
	return &copyBuffers{pool: sync.Pool{New: func() any { return new([copyBufferSize]byte) }}}
}

func (b *copyBuffers) Get() []byte { return b.pool.Get().(*[copyBufferSize]byte)[:] }

// Put takes back only what Get lent: a full-length buffer. The conversion
// to an array pointer does not allocate, as boxing a slice would.
func (b *copyBuffers) Put(buf []byte) {
	if len(buf) != copyBufferSize {
		return
	}
	b.pool.Put((*[copyBufferSize]byte)(buf))
}

// watchCopyBufferSize is the copy buffer of a watch: an idle watch holds its
// buffer while it waits for the next event, for as long as it lives, and
// with 32 KiB that buffer was most of what an idle watch cost the gateway
// (docs/performance.md, section 7). A watch event larger than this takes
// more than one read and write, each flushed; kube-apiserver writes one
// event at a time.
const watchCopyBufferSize = 8 << 10

// watchCopyBuffers lends the watches' reverse proxy its smaller buffers.
type watchCopyBuffers struct{ pool sync.Pool }

func newWatchCopyBuffers() *watchCopyBuffers {
	return &watchCopyBuffers{pool: sync.Pool{New: func() any { return new([watchCopyBufferSize]byte) }}}
}

func (b *watchCopyBuffers) Get() []byte { return b.pool.Get().(*[watchCopyBufferSize]byte)[:] }

func (b *watchCopyBuffers) Put(buf []byte) {
	if len(buf) == watchCopyBufferSize {
		b.pool.Put((*[watchCopyBufferSize]byte)(buf))
	}
}
