package multicluster

import (
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// Importing this package must cost a user's module nothing beyond client-go:
// it imports only the standard library, client-go and apimachinery, and its
// dependencies come from no module that client-go's rest package does not
// already need (no test-only modules, no apiserver, no konnectivity).
func TestImportsOnlyClientGoAndApimachinery(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("this test runs `go list`, and go is not on PATH: %v", err)
	}
	list := func(args ...string) []string {
		t.Helper()
		out, err := exec.Command(goBin, append([]string{"list"}, args...)...).Output()
		if err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				t.Fatalf("go list %v: %v\n%s", args, err, ee.Stderr)
			}
			t.Fatalf("go list %v: %v", args, err)
		}
		return strings.Fields(string(out))
	}

	for _, imp := range list("-f", `{{join .Imports " "}}`, ".") {
		std := !strings.Contains(strings.SplitN(imp, "/", 2)[0], ".")
		if !std && !strings.HasPrefix(imp, "k8s.io/client-go/") && !strings.HasPrefix(imp, "k8s.io/apimachinery/") {
			t.Errorf("imports %s: only the standard library, client-go and apimachinery are allowed", imp)
		}
	}

	modules := func(pkgs ...string) map[string]bool {
		m := map[string]bool{}
		for _, p := range list(append([]string{"-deps", "-f", `{{with .Module}}{{.Path}}{{end}}`}, pkgs...)...) {
			m[p] = true
		}
		return m
	}
	ours := modules(".")
	allowed := modules("k8s.io/client-go/rest", "k8s.io/apimachinery/pkg/util/validation")
	self := list("-m")[0]
	var extra []string
	for m := range ours {
		if !allowed[m] && m != self {
			extra = append(extra, m)
		}
	}
	sort.Strings(extra)
	if len(extra) > 0 {
		t.Errorf("pkg/multicluster pulls in modules client-go's rest package does not: %v", extra)
	}
	var selfPkgs []string
	for _, p := range list("-deps", "-f", `{{with .Module}}{{if eq .Path "`+self+`"}}{{$.ImportPath}}{{end}}{{end}}`, ".") {
		selfPkgs = append(selfPkgs, p)
	}
	if len(selfPkgs) != 1 {
		t.Errorf("pkg/multicluster depends on other packages of %s: %v; it must stand alone", self, selfPkgs)
	}
}
