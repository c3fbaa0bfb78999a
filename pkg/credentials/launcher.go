package credentials

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/clustergateway/cluster-gateway/pkg/boundedyaml"
)

// The launcher is the gateway's own binary run as client-go's exec plugin
// command: client-go gives a plugin the parent's whole environment and its
// stderr, and waits for it without a bound. The launcher runs the
// configured command instead with only the configured environment (and
// KUBERNETES_EXEC_INFO), no stdin, its stderr discarded and its output
// bounded, and kills its process group at the timeout.
const launcherArg = "__credential-provider-launcher"

// Exit codes of the launcher's own failures; any other is the provider's.
const (
	exitTimeout  = 124 // as timeout(1)
	exitTooLarge = 125
	exitNotRun   = 127 // as a shell: the command could not be started
)

// maxOutput bounds a provider's ExecCredential: a token and a certificate
// chain with its key fit many times over.
const maxOutput = 1 << 20

// outputLimits bound the parse of a provider's output: no YAML alias
// expands it (an ExecCredential never has one), and its nodes are few.
var outputLimits = boundedyaml.Limits{MaxBytes: maxOutput, MaxNodes: 10000}

// refreshAt is how much of a credential's remaining life may pass before
// client-go runs the provider again: the ExecCredential's
// expirationTimestamp is moved to 4/5 of the way, so a request never
// leaves with a token about to expire.
const refreshNum, refreshDen = 4, 5

// RunLauncherIfAsked runs the launcher and exits when the process was
// started as one; call it first in main (and in TestMain of tests that run
// providers).
func RunLauncherIfAsked() {
	if len(os.Args) > 1 && os.Args[1] == launcherArg {
		os.Exit(runLauncher(os.Args[2:], os.Stdout))
	}
}

// launcherArgs are client-go's exec args for provider p: the launcher's
// own (the timeout, the names of the variables to pass, the file where it
// notes the credential's expiry), then the provider's command and args.
func launcherArgs(p *Provider, expiryFile string) []string {
	names := make([]string, len(p.Exec.Env))
	for i, e := range p.Exec.Env {
		names[i] = e.Name
	}
	out := []string{launcherArg, p.timeout.String(), strings.Join(names, ","), expiryFile, "--", p.Exec.Command}
	return append(out, p.Exec.Args...)
}

func runLauncher(args []string, stdout io.Writer) int {
	if len(args) < 5 || args[3] != "--" {
		return exitNotRun
	}
	expiryFile := args[2]
	args = append(args[:2:2], args[3:]...)
	timeout, err := time.ParseDuration(args[0])
	if err != nil {
		return exitNotRun
	}
	env := []string{}
	for _, name := range append(strings.Split(args[1], ","), execInfoEnv) {
		if v, ok := os.LookupEnv(name); ok && name != "" {
			env = append(env, name+"="+v)
		}
	}
	out := &boundedBuffer{max: maxOutput}
	cmd := exec.Command(args[3], args[4:]...)
	cmd.Env, cmd.Stdout = env, out // stdin and stderr: /dev/null
	// Its own process group, killed as a whole: a shell script's children
	// go too. It dies with the launcher.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = time.Second // a child that keeps stdout open does not hold the launcher
	if err := cmd.Start(); err != nil {
		return exitNotRun
	}
	timedOut := make(chan struct{})
	timer := time.AfterFunc(timeout, func() {
		close(timedOut)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	})
	err = cmd.Wait()
	timer.Stop()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // what it left running
	select {
	case <-timedOut:
		return exitTimeout
	default:
	}
	var exit *exec.ExitError
	switch {
	case out.over:
		return exitTooLarge
	case errors.As(err, &exit):
		if code := exit.ExitCode(); code > 0 {
			return code
		}
		return 128 + int(syscall.SIGKILL) // killed by a signal
	case err != nil:
		return exitNotRun
	}
	cred, expires, ok := refreshEarly(out.Bytes(), time.Now())
	if !ok {
		return exitNotCredential
	}
	// Noted before client-go has the credential: by the time it returns
	// it, its expiry is in the file. A credential whose expiry cannot be
	// noted is still one: the gateway then knows no expiry for it.
	if expiryFile != "" && writeExpiry(expiryFile, expires) != nil {
		_ = os.Remove(expiryFile)
	}
	_, _ = stdout.Write(cred)
	return 0
}

// writeExpiry notes a credential's expiry in file for the gateway, which
// client-go does not tell it: only the time (RFC 3339), nothing of the
// credential; no file when the credential has none. A reader sees the
// old file or the new one, never part of one.
func writeExpiry(file string, expires time.Time) error {
	if expires.IsZero() {
		if err := os.Remove(file); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), ".expiry-*")
	if err != nil {
		return err
	}
	_, err = tmp.WriteString(expires.UTC().Format(time.RFC3339))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), file)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}

// readExpiry is what the launcher last noted in file: zero when the
// credential has no expiry (or the file cannot be read).
func readExpiry(file string) time.Time {
	raw, err := os.ReadFile(file)
	if err != nil {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(string(raw)))
	if err != nil {
		return time.Time{}
	}
	return t
}

// refreshEarly moves an ExecCredential's expirationTimestamp to refreshAt
// of its remaining life; expires is the original one (zero: none). ok is
// false when raw is no ExecCredential: it is not passed on, for
// client-go's decoding error would quote it.
func refreshEarly(raw []byte, now time.Time) (cred []byte, expires time.Time, ok bool) {
	js, err := boundedyaml.ToJSON(raw, outputLimits)
	if err != nil {
		return nil, time.Time{}, false
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var obj map[string]interface{}
	if dec.Decode(&obj) != nil || obj["kind"] != "ExecCredential" {
		return nil, time.Time{}, false
	}
	if _, ok := obj["apiVersion"].(string); !ok {
		return nil, time.Time{}, false
	}
	status, ok := obj["status"].(map[string]interface{})
	if !ok {
		return nil, time.Time{}, false
	}
	ts, _ := status["expirationTimestamp"].(string)
	exp, err := time.Parse(time.RFC3339, ts)
	if err != nil {
		return js, time.Time{}, true // client-go refuses it with its own error
	}
	if !exp.After(now) {
		return js, exp, true
	}
	status["expirationTimestamp"] = now.Add(exp.Sub(now) * refreshNum / refreshDen).UTC().Format(time.RFC3339)
	if js, err = json.Marshal(obj); err != nil {
		return nil, time.Time{}, false
	}
	return js, exp, true
}

// boundedBuffer keeps up to max bytes and notes whether more came.
type boundedBuffer struct {
	bytes.Buffer
	max  int
	over bool
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.max {
		b.over = true
		return 0, errors.New("output too large")
	}
	return b.Buffer.Write(p)
}

// exitNotCredential: the provider printed something other than an
// ExecCredential, which client-go's decoding error would quote.
const exitNotCredential = 126
