package localenv

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// ExecInContainer runs cmd with a tiny built-in interpreter (see run).
func (k *FakeKubelet) ExecInContainer(ctx context.Context, pod, uid, container string, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, timeout time.Duration) error {
	drainResize(resize)
	stdin, closeStdin := pipeStdin(in)
	defer closeStdin()
	sh := &shell{cluster: k.Cluster, pod: pod, container: container, in: stdin, out: orDiscard(out), err: orDiscard(errOut)}
	if tty {
		sh.err = sh.out // a terminal has one output stream
	}
	return sh.run(ctx, cmd)
}

// AttachContainer greets, then echoes stdin; without stdin it prints a line
// a second, like a running container, until the client leaves.
func (k *FakeKubelet) AttachContainer(ctx context.Context, pod, uid, container string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	drainResize(resize)
	w := orDiscard(out)
	if _, err := fmt.Fprintf(w, "attached to %s/%s/%s\n", k.Cluster, pod, container); err != nil {
		return nil
	}
	if in != nil {
		stdin, closeStdin := pipeStdin(in)
		defer closeStdin()
		_, _ = io.Copy(w, stdin)
		return nil
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if _, err := fmt.Fprintf(w, "tick %d\n", n); err != nil {
				return nil
			}
		}
	}
}

// drainResize keeps reading terminal resizes; a blocked sender stalls the session.
func drainResize(resize <-chan remotecommand.TerminalSize) {
	if resize == nil {
		return
	}
	go func() {
		for range resize {
		}
	}()
}

// pipeStdin reads stdin in its own goroutine, so a command that never reads
// stdin does not hold up the stream. The returned func releases that goroutine.
func pipeStdin(in io.Reader) (io.Reader, func()) {
	if in == nil {
		return strings.NewReader(""), func() {}
	}
	pr, pw := io.Pipe()
	go func() { _, err := io.Copy(pw, in); pw.CloseWithError(err) }()
	return pr, func() { pr.Close() }
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// shell is the fake container's command interpreter.
type shell struct {
	cluster, pod, container string
	in                      io.Reader
	out, err                io.Writer
}

func exitCode(code int, format string, args ...any) error {
	return utilexec.CodeExitError{Err: fmt.Errorf(format, args...), Code: code}
}

// run supports: echo ARGS, stderr ARGS (to stderr), cat (stdin to stdout),
// exit N, sleep SECONDS, whoami, hostname (the cluster's name), env, true,
// false, and sh -c "CMD; CMD". Unknown commands exit 127.
// Exit codes are returned as an unwrapped CodeExitError: only that reaches kubectl.
func (s *shell) run(ctx context.Context, argv []string) error {
	if len(argv) == 0 {
		return exitCode(126, "no command")
	}
	args := argv[1:]
	switch argv[0] {
	case "echo":
		fmt.Fprintln(s.out, strings.Join(args, " "))
	case "stderr":
		fmt.Fprintln(s.err, strings.Join(args, " "))
	case "cat":
		_, _ = io.Copy(s.out, s.in)
	case "exit":
		code := 0
		if len(args) > 0 {
			c, err := strconv.Atoi(args[0])
			if err != nil {
				return exitCode(2, "exit: %q is not a number", args[0])
			}
			code = c
		}
		if code != 0 {
			return exitCode(code, "exit %d", code)
		}
	case "sleep":
		d := time.Second
		if len(args) > 0 {
			secs, err := strconv.ParseFloat(args[0], 64)
			if err != nil {
				return exitCode(2, "sleep: %q is not a number", args[0])
			}
			d = time.Duration(secs * float64(time.Second))
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return exitCode(130, "interrupted")
		}
	case "whoami":
		fmt.Fprintln(s.out, "root")
	case "hostname":
		fmt.Fprintln(s.out, s.cluster)
	case "env":
		fmt.Fprintf(s.out, "CLUSTER=%s\nPOD=%s\nCONTAINER=%s\n", s.cluster, s.pod, s.container)
	case "true":
	case "false":
		return exitCode(1, "false")
	case "sh", "bash":
		if len(args) != 2 || args[0] != "-c" {
			return exitCode(2, "only `sh -c \"CMD; CMD\"` is supported")
		}
		for _, part := range strings.Split(args[1], ";") {
			if fields := strings.Fields(part); len(fields) > 0 {
				if err := s.run(ctx, fields); err != nil {
					return err
				}
			}
		}
	default:
		fmt.Fprintf(s.err, "%s: command not found (fake container: try echo, cat, exit N, sleep N, hostname)\n", argv[0])
		return exitCode(127, "%s: command not found", argv[0])
	}
	return nil
}
