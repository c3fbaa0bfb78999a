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
