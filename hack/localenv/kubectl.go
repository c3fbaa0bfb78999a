package localenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// KubectlPath is the real kubectl binary the environment uses.
func (e *Env) KubectlPath() string { return filepath.Join(e.BinDir, "kubectl") }

// KubectlCmd prepares the real kubectl with --kubeconfig set; the caller
// sets stdin/stdout/env, runs it, and kills it by pid if it keeps running.
func (e *Env) KubectlCmd(ctx context.Context, kubeconfig string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, e.KubectlPath(), append([]string{"--kubeconfig=" + kubeconfig}, args...)...)
	// Only our kubeconfig: ignore $KUBECONFIG and ~/.kube of whoever runs this.
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "HOME="+e.StateDir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Kubectl runs kubectl with kubeconfig and returns its stdout; the error
// includes stderr. It gives up after a minute.
func (e *Env) Kubectl(kubeconfig string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return e.KubectlCtx(ctx, kubeconfig, nil, args...)
}

// KubectlCtx is Kubectl with a context and optional stdin.
func (e *Env) KubectlCtx(ctx context.Context, kubeconfig string, stdin []byte, args ...string) (string, error) {
	cmd := e.KubectlCmd(ctx, kubeconfig, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}
