package clusters

import (
	"bytes"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The gateway store has two followers: the clusters' records (this
// package) and the inventory sync. Whoever else keeps state per gateway
// follows the records (Owner.OnChange), so that a gateway's change is one
// step. This type-checks every package of the product (tests aside), with
// the export data go list builds, and fails on a call of OnChange on a
// *gateways.Store anywhere else.
func TestOnlyTheOwnerAndTheInventorySyncFollowTheStore(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-export", "-deps", "-f",
		"{{.ImportPath}}\t{{.Export}}\t{{.Dir}}\t{{if .Module}}{{.Module.Main}}{{end}}\t{{join .GoFiles \" \"}}", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export ./...: %v\n%s", err, stderr.String())
	}
	exports := map[string]string{}
	type pkg struct {
		path, dir string
		files     []string
	}
	var product []pkg
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 5 {
			t.Fatalf("go list line %q: want 5 fields", line)
		}
		exports[f[0]] = f[1]
		if f[3] == "true" {
			product = append(product, pkg{f[0], f[2], strings.Fields(f[4])})
		}
	}
	const storePkg = "github.com/clustergateway/cluster-gateway/pkg/gateways"
	allowed := map[string]bool{
		"github.com/clustergateway/cluster-gateway/pkg/clusters":  true,
		"github.com/clustergateway/cluster-gateway/pkg/inventory": true,
	}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		return os.Open(exports[path])
	})
	followers := map[string]int{}
	for _, p := range product {
		fset := token.NewFileSet()
		var files []*ast.File
		for _, name := range p.files {
			f, err := parser.ParseFile(fset, filepath.Join(p.dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}}
		if _, err := (&types.Config{Importer: imp}).Check(p.path, fset, files, info); err != nil {
			t.Fatalf("type-checking %s: %v", p.path, err)
		}
		for sel, s := range info.Selections {
			if sel.Sel.Name != "OnChange" || s.Kind() != types.MethodVal {
				continue
			}
			recv := s.Recv()
			if ptr, ok := recv.(*types.Pointer); ok {
				recv = ptr.Elem()
			}
			named, ok := recv.(*types.Named)
			if !ok || named.Obj().Name() != "Store" || named.Obj().Pkg() == nil || named.Obj().Pkg().Path() != storePkg {
				continue
			}
			followers[p.path]++
			if !allowed[p.path] {
				t.Errorf("%s: %s follows the gateway store itself: follow the clusters' records (clusters.Owner.OnChange), so that a gateway's change is one step", fset.Position(sel.Pos()), p.path)
			}
		}
	}
	// The check found what it checks for: both followers, from a full list.
	for path := range allowed {
		if followers[path] == 0 {
			t.Errorf("found no call of OnChange on the store in %s: the check no longer sees what it checks (%d product packages listed)", path, len(product))
		}
	}
}
