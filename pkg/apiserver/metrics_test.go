package apiserver

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// Metrics are registered one way: each component has a Metrics() whose
// Register(metrics.KubeRegistry) adds them, and registerMetrics calls it
// once. This reads the source of every pkg/ package (tests aside) and
// fails on a registry call outside such a Register method, on a
// package-level variable that holds metrics (one per process, registered
// from anywhere), and on the global legacy registry outside this package.
func TestOneWayToRegisterMetrics(t *testing.T) {
	root := ".."
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") ||
			strings.Contains(path, string(filepath.Separator)+"generated"+string(filepath.Separator)) {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		for _, imp := range f.Imports {
			if imp.Path.Value == `"k8s.io/component-base/metrics/legacyregistry"` && filepath.Base(filepath.Dir(path)) != "apiserver" {
				t.Errorf("%s imports legacyregistry: give the component a Metrics() with Register, and let pkg/apiserver register it", path)
			}
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.GenDecl:
				if d.Tok != token.VAR {
					continue
				}
				for _, spec := range d.Specs {
					for _, v := range spec.(*ast.ValueSpec).Values {
						if makesMetrics(v) {
							t.Errorf("%s: package-level metrics at %s: keep them in the component, returned by its Metrics()", path, fset.Position(v.Pos()))
						}
					}
				}
			case *ast.FuncDecl:
				if isRegisterMethod(d) {
					continue
				}
				ast.Inspect(d, func(n ast.Node) bool {
					call, ok := n.(*ast.CallExpr)
					if !ok {
						return true
					}
					if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
						switch sel.Sel.Name {
						case "MustRegister", "CustomMustRegister", "RawMustRegister", "CustomRegister":
							t.Errorf("%s: %s in %s: register only in a Metrics type's Register method", fset.Position(call.Pos()), sel.Sel.Name, d.Name.Name)
						}
					}
					return true
				})
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("read %d files under pkg/, want them all", files)
	}
}

// isRegisterMethod: func (m *Metrics) Register(r metrics.KubeRegistry).
func isRegisterMethod(d *ast.FuncDecl) bool {
	if d.Recv == nil || d.Name.Name != "Register" || len(d.Recv.List) != 1 {
		return false
	}
	star, ok := d.Recv.List[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	id, ok := star.X.(*ast.Ident)
	return ok && id.Name == "Metrics"
}

// makesMetrics: a call to newMetrics, NewMetrics or metrics.New*.
func makesMetrics(e ast.Expr) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		switch fn := call.Fun.(type) {
		case *ast.Ident:
			found = found || fn.Name == "newMetrics" || fn.Name == "NewMetrics"
		case *ast.SelectorExpr:
			if x, ok := fn.X.(*ast.Ident); ok && x.Name == "metrics" && strings.HasPrefix(fn.Sel.Name, "New") {
				found = true
			}
			found = found || fn.Sel.Name == "NewMetrics"
		}
		return true
	})
	return found
}
