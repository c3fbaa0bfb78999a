package localenv

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	utilexec "k8s.io/utils/exec"
)

// binDir is $KUBE_BIN or the Makefile's output; the test fails without the
// binaries (`make test-unit` builds them first).
func binDir(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("KUBE_BIN")
	if bin == "" {
		bin = filepath.Join("..", "..", "_output", "bin")
	}
	if err := CheckBinaries(bin, true); err != nil {
		t.Fatalf("needs the built binaries (make tools build, or KUBE_BIN):\n%v", err)
	}
	return bin
}

// TestFailedStartStopsEverything: a gateway that cannot start fails Start
// with its log, and no process started for the environment survives.
func TestFailedStartStopsEverything(t *testing.T) {
	state := t.TempDir()
	_, err := Start(context.Background(), Options{
		StateDir:    state,
		BinDir:      binDir(t),
		GatewayArgs: []string{"--no-such-flag"},
		Logf:        t.Logf,
	})
	if err == nil || !strings.Contains(err.Error(), "cluster-gateway exited early") {
		t.Fatalf("Start with a broken gateway flag: err = %v, want cluster-gateway exited early", err)
	}
	if left := processesMentioning(t, state); len(left) > 0 {
		t.Fatalf("processes left running after a failed Start: %v", left)
	}
}

// processesMentioning lists processes whose command line contains s.
func processesMentioning(t *testing.T, s string) []string {
	t.Helper()
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var found []string
	for _, p := range cmdlines {
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(s)) {
			found = append(found, filepath.Base(filepath.Dir(p))+": "+string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
		}
	}
	return found
}

func TestShell(t *testing.T) {
	cases := []struct {
		argv           []string
		stdin          string
		stdout, stderr string
		code           int
	}{
		{[]string{"echo", "a", "b"}, "", "a b\n", "", 0},
		{[]string{"cat"}, "x\ny\n", "x\ny\n", "", 0},
		{[]string{"hostname"}, "", "managed-9\n", "", 0},
		{[]string{"exit", "7"}, "", "", "", 7},
		{[]string{"sh", "-c", "echo out; stderr err; exit 3; echo never"}, "", "out\n", "err\n", 3},
		{[]string{"nope"}, "", "", "nope: command not found", 127},
	}
	for _, c := range cases {
		var out, errOut bytes.Buffer
		sh := &shell{cluster: "managed-9", pod: "demo", container: "main", in: strings.NewReader(c.stdin), out: &out, err: &errOut}
		err := sh.run(context.Background(), c.argv)
		code := 0
		var exitErr utilexec.CodeExitError
		if errors.As(err, &exitErr) {
			code = exitErr.Code
		} else if err != nil {
			t.Errorf("%v: unexpected error %v", c.argv, err)
		}
		if out.String() != c.stdout || !strings.Contains(errOut.String(), c.stderr) || code != c.code {
			t.Errorf("%v: stdout %q stderr %q code %d; want %q, containing %q, %d", c.argv, out.String(), errOut.String(), code, c.stdout, c.stderr, c.code)
		}
	}
}
