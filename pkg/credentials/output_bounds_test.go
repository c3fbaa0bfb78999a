package credentials

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	clientauthv1 "k8s.io/client-go/pkg/apis/clientauthentication/v1"
)

// A provider's output is parsed within bounds: an ExecCredential made of
// YAML aliases (about 200 KiB that a YAML-to-JSON conversion following them
// expands to over a GiB) is refused as no credential, and reading it
// allocates a small multiple of its size; the same credential written out
// in YAML is still read.
func TestProviderOutputAliasesRefused(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: client.authentication.k8s.io/v1\nkind: ExecCredential\nstatus:\n  token: tok\n  pad: &a \"%s\"\n  more: [", strings.Repeat("x", 200<<10))
	for i := range 2000 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("*a")
	}
	b.WriteString("]\n")
	bomb := []byte(b.String())

	var before, after runtime.MemStats
	var ok bool
	runtime.ReadMemStats(&before)
	_, _, ok = refreshEarly(bomb, clientauthv1.SchemeGroupVersion, time.Now())
	runtime.ReadMemStats(&after)
	// pkg/boundedyaml's documented cost: at most 160 bytes allocated per
	// byte of input.
	if got, bound := after.TotalAlloc-before.TotalAlloc, uint64(160*len(bomb)+1<<20); got > bound {
		t.Errorf("reading a %d KiB alias bomb allocated %d MiB, want at most %d MiB", len(bomb)>>10, got>>20, bound>>20)
	}
	if ok {
		t.Errorf("an ExecCredential made of aliases was passed on")
	}

	plain := "apiVersion: client.authentication.k8s.io/v1\nkind: ExecCredential\nstatus:\n  token: tok\n"
	if cred, _, ok := refreshEarly([]byte(plain), clientauthv1.SchemeGroupVersion, time.Now()); !ok || !strings.Contains(string(cred), `"token":"tok"`) {
		t.Errorf("a YAML ExecCredential: %s, %v; want it read", cred, ok)
	}
}
