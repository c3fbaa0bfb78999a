package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"
)

// child is the bench binary run again as a process of its own (the bare
// proxy, the noisy neighbour), which lives until its stdin ends.
type child struct {
	what   string // for errors: "the bare proxy"
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.Reader
}

// childAnswer bounds a child's answers (its start, the neighbour's counts)
// and its exit after stop.
const childAnswer = 30 * time.Second

// startChild runs this binary with -flag and args.
func startChild(ctx context.Context, what, flag string, args ...string) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self, append([]string{"-" + flag}, args...)...)
	// Should this process die without stopping it, the child's stdin ends
	// with it, and so does the child; a cancelled ctx kills it.
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		stdin.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil { // closes both pipes
		return nil, fmt.Errorf("start %s %s: %w", what, self, err)
	}
	return &child{what: what, cmd: cmd, stdin: stdin, stdout: stdout}, nil
}

// Pid is the child's process id.
func (c *child) Pid() int { return c.cmd.Process.Pid }

// errorf is an error about the child, naming it and its pid.
func (c *child) errorf(format string, args ...any) error {
	return fmt.Errorf("%s (pid %d) %s", c.what, c.Pid(), fmt.Sprintf(format, args...))
}

// stop ends the child (its stdin) and waits for it; if it has not ended
// within childAnswer, it is killed by its pid. Either way it has exited
// (and been waited for) when stop returns.
func (c *child) stop() error {
	c.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("%s (pid %d): %w", c.what, c.Pid(), err)
		}
		return nil
	case <-time.After(childAnswer):
		_ = c.cmd.Process.Kill()
		return c.errorf("did not stop; killed: %v", <-done)
	}
}
