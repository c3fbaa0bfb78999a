package credentials

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// providerBin is testdata/provider, built once for the package's tests.
var providerBin string

func TestMain(m *testing.M) {
	RunLauncherIfAsked() // providers run through this binary, as through the gateway's
	dir, err := os.MkdirTemp("", "credentials-test-provider")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	providerBin = filepath.Join(dir, "provider")
	if out, err := exec.Command("go", "build", "-o", providerBin, "./testdata/provider").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build testdata/provider: %v\n%s", err, out)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		_ = os.RemoveAll(dir)
		os.Exit(code)
	}))
}
