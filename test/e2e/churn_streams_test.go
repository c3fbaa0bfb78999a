package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// execStream is a running `kubectl exec -i demo -- cat`: a long-lived
// upgraded stream through the in-test gateway, ended by closing stdin or
// cut by a retirement.
type execStream struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *syncBuffer
	done   chan execExit // kubectl's exit, put back by each reader
}

// execExit is how and when kubectl exited.
type execExit struct {
	Err    error
	At     time.Time
	Killed bool // by the test, not on its own
}

// startExecStream starts the stream and checks that it carries data.
func startExecStream(t *testing.T, kubeconfig string, p streamProtocol) *execStream {
	t.Helper()
	cmd := env.KubectlCmd(context.Background(), kubeconfig, "exec", "-i", "demo", "--", "cat")
	cmd.Env = append(cmd.Env, p.Env...)
	s := &execStream{cmd: cmd, lines: make(chan string, 16), stderr: &syncBuffer{}, done: make(chan execExit, 1)}
	cmd.Stderr = s.stderr
	var err error
	if s.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
		err := cmd.Wait() // after the last read, as os/exec requires
		s.done <- execExit{Err: err, At: time.Now()}
	}()
	// No t.Cleanup here: hundreds of streams in a soak would pile up in
	// the test's cleanup list (and on the measured heap). The caller ends
	// every stream it started.
	if err := s.echo("ping"); err != nil {
		s.kill()
		t.Fatalf("exec stream over %s: %v\nkubectl stderr:\n%s", p.Name, err, s.stderr)
	}
	return s
}

// echo sends a line and waits for cat to send it back.
func (s *execStream) echo(line string) error {
	if _, err := io.WriteString(s.stdin, line+"\n"); err != nil {
		return err
	}
	select {
	case got, ok := <-s.lines:
		if !ok {
			return errors.New("kubectl exited")
		}
		if got != line {
			return fmt.Errorf("echoed %q, want %q", got, line)
		}
		return nil
	case <-time.After(kubectlTimeout):
		return fmt.Errorf("no echo within %s", kubectlTimeout)
	}
}

// finish closes stdin and returns kubectl's exit: nil when the stream was
// still up and ended normally.
func (s *execStream) finish() error {
	_ = s.stdin.Close()
	e := s.waitExit(kubectlTimeout)
	if e.Killed {
		return fmt.Errorf("kubectl exec did not exit within %s of its stdin closing; killed", kubectlTimeout)
	}
	return e.Err
}

// waitExit waits up to d for kubectl to exit on its own, and kills it (by
// pid) if it does not: the exit then says Killed.
func (s *execStream) waitExit(d time.Duration) execExit {
	select {
	case e := <-s.done:
		s.done <- e // for kill and later waits
		return e
	case <-time.After(d):
		return s.kill()
	}
}

// kill ends kubectl by pid unless it has exited, and returns its exit.
func (s *execStream) kill() execExit {
	select {
	case e := <-s.done:
		s.done <- e
		return e
	default:
		_ = syscall.Kill(s.cmd.Process.Pid, syscall.SIGKILL)
		e := <-s.done
		e.Killed = true
		s.done <- e
		return e
	}
}

// openWatch watches ConfigMaps in ns through cs and checks that it delivers
// an event: a ConfigMap created directly on the managed cluster.
func openWatch(t *testing.T, cs, direct kubernetes.Interface, ns, marker string) watch.Interface {
	t.Helper()
	w, err := cs.CoreV1().ConfigMaps(ns).Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watch through the in-test gateway: %v", err)
	}
	if _, err := direct.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: marker}}, metav1.CreateOptions{}); err != nil {
		w.Stop()
		t.Fatal(err)
	}
	if err := waitAdded(w, marker); err != nil {
		w.Stop()
		t.Fatal(err)
	}
	return w
}
