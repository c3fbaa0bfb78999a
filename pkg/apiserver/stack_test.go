package apiserver

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"unsafe"
)

// deepStack is what a handler below the chain uses: less than growStack
// gave, more than a new goroutine's stack holds.
const deepStack = 12 << 10

// stackMoved reports whether serving through h copied the serving
// goroutine's stack: a growth moves every frame, so the address of the
// innermost handler's local changes while it recurses deepStack bytes down.
func stackMoved(h func(http.Handler) http.Handler) bool {
	moved := make(chan bool)
	inner := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		var local byte
		before := uintptr(unsafe.Pointer(&local))
		recurse(deepStack / 1024)
		moved <- before != uintptr(unsafe.Pointer(&local))
	})
	go h(inner).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	return <-moved
}

//go:noinline
func recurse(kib int) byte {
	var frame [1024]byte
	if kib <= 1 {
		return frame[kib]
	}
	return recurse(kib-1) + frame[0]
}

// TestChainGrowsTheStackWhileShallow: behind withGrownStack a handler uses
// 12 KiB of stack without a growth; without it, the same handler's stack
// grows (the check that the test can see a growth at all). It runs in a
// child with GODEBUG=adaptivestackstart=0, so that every goroutine starts
// with the runtime's smallest stack whatever other tests did before.
func TestChainGrowsTheStackWhileShallow(t *testing.T) {
	if os.Getenv("STACK_TEST_CHILD") == "" {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestChainGrowsTheStackWhileShallow$", "-test.v")
		cmd.Env = append(os.Environ(), "STACK_TEST_CHILD=1", "GODEBUG=adaptivestackstart=0")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestChainGrowsTheStackWhileShallow") {
			t.Fatalf("the child failed (%v):\n%s", err, out)
		}
		return
	}
	if !stackMoved(func(h http.Handler) http.Handler { return h }) {
		t.Fatal("a handler's deep stack did not grow without withGrownStack: this test cannot see a growth")
	}
	if stackMoved(withGrownStack) {
		t.Errorf("behind withGrownStack the handler's stack still grew while it used %d KiB: growStack gave too little", deepStack>>10)
	}
}
