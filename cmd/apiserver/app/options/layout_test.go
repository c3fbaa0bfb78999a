package options

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Every flag of the gateway is defined in this package: the packages under
// pkg/ take plain config types and define no flag. A pkg/ package that
// imports a flag library (or a pkg/ test that builds a pflag set against
// one) fails here, by what go list reports it imports.
func TestNoFlagsInPkg(t *testing.T) {
	root, err := filepath.Abs("../../../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}|{{join .Imports " "}}|{{join .TestImports " "}} {{join .XTestImports " "}}`, "./pkg/...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if e, ok := err.(*exec.ExitError); ok {
			stderr = string(e.Stderr)
		}
		t.Fatalf("go list ./pkg/...: %v\n%s", err, stderr)
	}
	// The program's own flags: no pkg/ package may define one. Tests may
	// use the standard library's flag to set klog's verbosity, not pflag.
	forbidden := map[string]bool{"github.com/spf13/pflag": true, "flag": true, "k8s.io/component-base/cli/flag": true}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 10 {
		t.Fatalf("go list found %d packages under pkg/, want them all:\n%s", len(lines), out)
	}
	for _, line := range lines {
		parts := strings.SplitN(line, "|", 3)
		if len(parts) != 3 {
			t.Fatalf("go list line %q: want path|imports|test imports", line)
		}
		for _, imp := range strings.Fields(parts[1]) {
			if forbidden[imp] {
				t.Errorf("%s imports %s: define its flags in cmd/apiserver/app/options and have the package take a plain config type", parts[0], imp)
			}
		}
		for _, imp := range strings.Fields(parts[2]) {
			if imp == "github.com/spf13/pflag" {
				t.Errorf("a test of %s imports %s: flags and their tests belong in cmd/apiserver/app/options", parts[0], imp)
			}
		}
	}
}
