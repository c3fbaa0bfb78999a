package credentials

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// providerBin is testdata/provider, built once for the package's tests.
var providerBin string

func TestMain(m *testing.M) {
	// Providers run through this binary, as through the gateway's; its
	// launcher runs from the package's init, which these tests rely on (no
	// RunLauncherIfAsked here: without the init, every provider test would
	// start this binary's tests again).
	dir, err := os.MkdirTemp("", "credentials-test-provider")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	providerBin = filepath.Join(dir, "provider")
	// Launchers are this binary: built with -race, each would sleep 1 s at
	// exit to let reports of other threads out (they report as they find).
	if err := os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if out, err := exec.Command("go", "build", "-o", providerBin, "./testdata/provider").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build testdata/provider: %v\n%s", err, out)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		_ = os.RemoveAll(dir)
		os.Exit(code)
	}))
}
