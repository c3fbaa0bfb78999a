package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
)

// Helpers that drive the real kubectl. They take a kubeconfig, so the same
// checks run directly against a managed cluster and through the gateway.

// kubectlTimeout only guards against hangs; nothing asserts on speed.
const kubectlTimeout = 60 * time.Second

type kubectlResult struct {
	Stdout, Stderr string
	ExitCode       int // -1 if kubectl did not run or was killed
	Err            error
}

// kubectl runs kubectl to completion with optional stdin and extra environment.
func kubectl(t *testing.T, kubeconfig string, extraEnv []string, stdin string, args ...string) kubectlResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	cmd := env.KubectlCmd(ctx, kubeconfig, args...)
	cmd.Env = append(cmd.Env, extraEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	err := cmd.Run()
	res := kubectlResult{Stdout: stdout.String(), Stderr: stderr.String(), Err: err}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		res.ExitCode = exitErr.ExitCode()
	default:
		res.ExitCode = -1
	}
	if ctx.Err() != nil {
		res.Err = fmt.Errorf("kubectl %s did not finish within %s: %w", strings.Join(args, " "), kubectlTimeout, ctx.Err())
	}
	return res
}

// mustKubectl runs kubectl and fails the test unless it exits 0; it returns stdout.
func mustKubectl(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	r := kubectl(t, kubeconfig, nil, "", args...)
	if r.Err != nil {
		t.Fatalf("kubectl %s: %v\nstderr: %s", strings.Join(args, " "), r.Err, r.Stderr)
	}
	return r.Stdout
}

// kubeconfigFile writes a self-contained kubeconfig for server and user at
// path ("": a new file in the test's temporary directory) and returns it.
func kubeconfigFile(t *testing.T, path, server string, caPEM []byte, user *clientcmdapi.AuthInfo) string {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "kubeconfig")
	}
	if err := localenv.WriteKubeconfig(path, "c", server, caPEM, user); err != nil {
		t.Fatal(err)
	}
	return path
}

// streamProtocol is how kubectl carries exec and port-forward. kubectl tries
// WebSocket first and silently falls back to SPDY, so each run also checks,
// in kubectl's -v=6 log, which protocol was actually used.
type streamProtocol struct {
	Name string
	Env  []string
}

var streamProtocols = []streamProtocol{
	{Name: "websocket", Env: []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=true", "KUBECTL_PORT_FORWARD_WEBSOCKETS=true"}},
	{Name: "spdy", Env: []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false", "KUBECTL_PORT_FORWARD_WEBSOCKETS=false"}},
}

var (
	upgraded = func(verb, sub string) *regexp.Regexp {
		return regexp.MustCompile(`verb="` + verb + `" url="[^"]*/` + sub + `[?"][^ ]* status="101 Switching Protocols"`)
	}
	wsExecNegotiated = regexp.MustCompile(`"Subprotocol negotiated" protocol="v5\.channel\.k8s\.io"`)
	wsPFNegotiated   = regexp.MustCompile(`"Negotiation complete" protocol="portforward\.k8s\.io"`)
)

// checkNegotiated fails unless kubectl's -v=6 log (stderr) shows that
// kind ("exec", "attach" or "portforward") was upgraded with protocol p,
// without fallback.
func (p streamProtocol) checkNegotiated(t *testing.T, kind, stderr string) {
	t.Helper()
	var must []*regexp.Regexp
	var mustNot []string
	switch p.Name {
	case "websocket":
		must = []*regexp.Regexp{upgraded("GET", kind)}
		if kind == "exec" || kind == "attach" {
			must = append(must, wsExecNegotiated)
		} else {
			must = append(must, wsPFNegotiated)
		}
		mustNot = []string{"RemoteCommand fallback", "fallback to secondary dialer"}
	case "spdy":
		must = []*regexp.Regexp{upgraded("POST", kind)}
		mustNot = []string{"Subprotocol negotiated", "Before WebSocket Upgrade"}
	}
	for _, re := range must {
		if !re.MatchString(stderr) {
			t.Errorf("%s over %s: kubectl's log does not match %s; log:\n%s", kind, p.Name, re, stderr)
		}
	}
	for _, s := range mustNot {
		if strings.Contains(stderr, s) {
			t.Errorf("%s over %s: kubectl's log contains %q; log:\n%s", kind, p.Name, s, stderr)
		}
	}
}

// checkExec runs commands in the demo pod over p: output, stdin, stderr and
// exit code must all arrive; `hostname` must name wantCluster.
func checkExec(t *testing.T, kubeconfig string, p streamProtocol, wantCluster string) {
	t.Helper()
	r := kubectl(t, kubeconfig, p.Env, "", "exec", "-v=6", "demo", "--", "hostname")
	if r.Err != nil {
		t.Fatalf("exec hostname over %s: %v\nstderr: %s", p.Name, r.Err, r.Stderr)
	}
	if got := strings.TrimSpace(r.Stdout); got != wantCluster {
		t.Errorf("exec hostname over %s = %q, want %q", p.Name, got, wantCluster)
	}
	p.checkNegotiated(t, "exec", r.Stderr)

	const in = "hello\nworld\n"
	r = kubectl(t, kubeconfig, p.Env, in, "exec", "-i", "demo", "--", "cat")
	if r.Err != nil || r.Stdout != in {
		t.Errorf("exec -i cat over %s: stdout %q, err %v, want stdout %q\nstderr: %s", p.Name, r.Stdout, r.Err, in, r.Stderr)
	}

	r = kubectl(t, kubeconfig, p.Env, "", "exec", "demo", "--", "sh", "-c", "echo out; stderr err; exit 3")
	if r.ExitCode != 3 || strings.TrimSpace(r.Stdout) != "out" || !strings.Contains(r.Stderr, "err") {
		t.Errorf("exec exit 3 over %s: exit code %d, stdout %q, stderr %q; want 3, \"out\", containing \"err\"", p.Name, r.ExitCode, r.Stdout, r.Stderr)
	}
}

// background is a long-running kubectl (port-forward, logs -f), stopped by pid.
type background struct {
	cmd    *exec.Cmd
	lines  chan string // stdout, line by line
	stderr *syncBuffer
}

func startKubectl(t *testing.T, kubeconfig string, extraEnv []string, args ...string) *background {
	t.Helper()
	cmd := env.KubectlCmd(context.Background(), kubeconfig, args...)
	cmd.Env = append(cmd.Env, extraEnv...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	b := &background{cmd: cmd, lines: make(chan string, 1000), stderr: &syncBuffer{}}
	cmd.Stderr = b.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start kubectl %s: %v", strings.Join(args, " "), err)
	}
	go func() {
		defer close(b.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			b.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() { b.stop() })
	return b
}

// waitLine returns the first stdout line matching re, or fails on exit or timeout.
func (b *background) waitLine(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	return b.waitLineWithin(t, re, kubectlTimeout)
}

// waitLineWithin returns the first stdout line matching re, or fails on exit
// or when d passes.
func (b *background) waitLineWithin(t *testing.T, re *regexp.Regexp, d time.Duration) []string {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case line, ok := <-b.lines:
			if !ok {
				t.Fatalf("kubectl exited before printing a line matching %s; stderr:\n%s", re, b.stderr)
			}
			if m := re.FindStringSubmatch(line); m != nil {
				return m
			}
		case <-timeout:
			t.Fatalf("kubectl printed no line matching %s within %s; stderr:\n%s", re, d, b.stderr)
		}
	}
}

// stop ends kubectl by pid (SIGTERM, then SIGKILL) and waits for it.
func (b *background) stop() {
	if b.cmd.ProcessState != nil {
		return
	}
	_ = syscall.Kill(b.cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = b.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(b.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

var forwarding = regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) ->`)

// checkPortForward forwards a local port to the demo pod over p and checks
// that bytes make the round trip through the fake kubelet's echo listener.
func checkPortForward(t *testing.T, kubeconfig string, p streamProtocol) {
	t.Helper()
	b := startKubectl(t, kubeconfig, p.Env, "port-forward", "-v=6", "--address=127.0.0.1", "pod/demo", ":80")
	port := b.waitLine(t, forwarding)[1]
	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+port, 10*time.Second)
	if err != nil {
		t.Fatalf("dial the forwarded port: %v", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(kubectlTimeout))
	// Big enough to span many frames in both directions.
	payload := bytes.Repeat([]byte("0123456789abcdef"), 16<<10)
	go func() { _, _ = conn.Write(payload) }()
	got := make([]byte, len(payload))
	if _, err := io.ReadFull(conn, got); err != nil {
		t.Fatalf("port-forward over %s: read echo: %v\nkubectl stderr:\n%s", p.Name, err, b.stderr)
	}
	if !bytes.Equal(got, payload) {
		t.Fatalf("port-forward over %s: echoed bytes differ from those sent", p.Name)
	}
	conn.Close()
	b.stop()
	p.checkNegotiated(t, "portforward", b.stderr.String())
}

var logLine = regexp.MustCompile(`^(\S+) demo/main line (\d+)$`)

// checkLogsFollow reads `kubectl logs -f demo` until lines written after the
// request started arrive (the fake kubelet writes 10, then one a second).
func checkLogsFollow(t *testing.T, kubeconfig, wantCluster string) {
	t.Helper()
	b := startKubectl(t, kubeconfig, nil, "logs", "-f", "demo")
	want := 1
	for want <= 12 {
		m := b.waitLine(t, logLine)
		if m[1] != wantCluster || m[2] != fmt.Sprint(want) {
			t.Fatalf("logs -f: got line %q, want %s line %d", m[0], wantCluster, want)
		}
		want++
	}
	b.stop()
}

// syncBuffer is a bytes.Buffer safe for a writing process and a reading test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
