package localenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Process is a child process started by the environment.
type Process struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
}

// Pid is the process id (also its process group id).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Done is closed when the process exits.
func (p *Process) Done() <-chan struct{} { return p.done }

// WaitErr is how the process ended (nil: exit status 0); valid once Exited.
func (p *Process) WaitErr() error {
	<-p.done
	return p.waitErr
}

// Stop sends SIGTERM to the process group, then SIGKILL after grace.
// It is safe to call more than once.
func (p *Process) Stop(grace time.Duration) error {
	if p.Exited() {
		return nil
	}
	// The child leads its own group (Setpgid), so -pid reaches only what it forked.
	_ = syscall.Kill(-p.Pid(), syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	return p.Kill()
}

// Kill ends the process group with SIGKILL at once and waits for the exit.
// A nil or exited process is left alone.
func (p *Process) Kill() error {
	if p == nil || p.Exited() {
		return nil
	}
	_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.Name, p.Pid())
	}
}

// LogTail returns the last n lines of the process log, for error messages.
func (p *Process) LogTail(n int) string { return tailFile(p.LogPath, n) }

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// spawner starts children from one goroutine locked to its OS thread, so that
// Pdeathsig (sent when the forking thread dies) kills them if this process is
// killed without running Stop, e.g. by `go test -timeout`. The thread lives
// until close, i.e. until every child has been stopped.
type spawner struct {
	reqs chan spawnReq
}

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

func newSpawner() *spawner {
	s := &spawner{reqs: make(chan spawnReq)}
	go func() {
		runtime.LockOSThread()
		// Never unlocked: the thread exits with this goroutine, after close.
		for r := range s.reqs {
			r.done <- r.cmd.Start()
		}
	}()
	return s
}

func (s *spawner) close() { close(s.reqs) }

// start runs bin with args, output appended to logPath.
func (s *spawner) start(name, logPath, bin string, args ...string) (*Process, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%s: binary %s is missing (build it with `make tools` or `make build`): %w", name, bin, err)
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logFile, "==== %s %s\n", time.Now().Format(time.RFC3339), strings.Join(append([]string{bin}, args...), " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	done := make(chan error, 1)
	s.reqs <- spawnReq{cmd: cmd, done: done}
	if err := <-done; err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// exitError describes an early exit with the end of the log.
func (p *Process) exitError() error {
	return fmt.Errorf("%s exited early (%v); last log lines from %s:\n%s", p.Name, p.waitErr, p.LogPath, p.LogTail(20))
}

var errAddrInUse = errors.New("address already in use")

// addrInUse reports whether the process died because its port was taken in
// the window between choosing the port and binding it.
func (p *Process) addrInUse() bool {
	return p.Exited() && strings.Contains(p.LogTail(40), errAddrInUse.Error())
}
