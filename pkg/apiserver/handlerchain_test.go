package apiserver

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildHandlerChain is a copy of k8s.io/apiserver's DefaultBuildHandlerChain
// with a few changes for proxied requests. When k8s.io/apiserver is upgraded
// and that function changes (a new filter, a reordering: possibly a security
// fix), this test fails until someone has compared the two and updated
// testdata/DefaultBuildHandlerChain.go.txt to the version reviewed.
func TestHandlerChainFollowsUpstream(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}} {{.Version}}", "k8s.io/apiserver").Output()
	if err != nil {
		t.Fatalf("go list -m k8s.io/apiserver: %v", err)
	}
	dir, version, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	src, err := os.ReadFile(filepath.Join(dir, "pkg", "server", "config.go"))
	if err != nil {
		t.Fatal(err)
	}
	got := functionSource(string(src), "func DefaultBuildHandlerChain(")
	if got == "" {
		t.Fatalf("k8s.io/apiserver %s has no DefaultBuildHandlerChain in pkg/server/config.go: review pkg/apiserver/handlerchain.go", version)
	}
	golden := filepath.Join("testdata", "DefaultBuildHandlerChain.go.txt")
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("k8s.io/apiserver %s changed DefaultBuildHandlerChain since pkg/apiserver/handlerchain.go was written from it: "+
			"compare the two (diff %s against the function in %s), carry the change over, then copy the new function into %s",
			version, golden, filepath.Join(dir, "pkg", "server", "config.go"), golden)
	}
}

// functionSource is the text of the top-level function whose declaration
// starts with decl, up to its closing brace at the start of a line.
func functionSource(src, decl string) string {
	i := strings.Index(src, "\n"+decl)
	if i < 0 {
		return ""
	}
	rest := src[i+1:]
	j := strings.Index(rest, "\n}\n")
	if j < 0 {
		return ""
	}
	return rest[:j+3]
}
