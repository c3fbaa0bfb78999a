package apiserver

import (
	"math/rand/v2"
	"net/http"
)

// chainStackFrame is what growStack puts on a request's stack at once:
// with it the goroutine's stack is 16 KiB before the first filter runs,
// which the chain, the authorizer and the proxy fit in for an ordinary
// request (32 KiB saved no more growths in the bench's profiles).
const chainStackFrame = 8 << 10

// withGrownStack grows each request's goroutine stack while the stack is
// shallow. The HTTP/2 server runs every request in a new goroutine whose
// stack starts small; left alone, it doubles deep in the chain (at the
// authorizer's cache key, under some 45 frames), and a growth copies and
// unwinds every frame on the stack: about 6% of the gateway's CPU per
// request on its port in the bench's profiles. Growing it here copies a
// few frames. The stack is the runtime's to shrink again at a GC.
func withGrownStack(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		growStack()
		next.ServeHTTP(w, req)
	})
}

// growStack needs chainStackFrame bytes of stack, so the runtime grows the
// stack to fit them in one step. It reads one byte at a random index so
// that the compiler keeps the array.
//
//go:noinline
func growStack() {
	var frame [chainStackFrame]byte
	if frame[rand.IntN(len(frame))] != 0 {
		panic("unreachable: the frame is zeroed")
	}
}
