package credentials

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/pkg/apis/clientauthentication"
	"k8s.io/client-go/pkg/apis/clientauthentication/install"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/clustergateway/cluster-gateway/pkg/boundedyaml"
)

// The launcher is the gateway's own binary run as client-go's exec plugin
// command: client-go gives a plugin the parent's whole environment and its
// stderr, waits for it without a bound, and quotes its output in errors it
// logs. The launcher runs the configured command instead with only the
// configured environment (and KUBERNETES_EXEC_INFO), no stdin, its stderr
// discarded and its output bounded; it kills the command's process group
// at the timeout and every descendant once the command ended (see
// descendants.go), and passes on only an ExecCredential client-go decodes,
// as the launcher itself encoded it.
const launcherArg = "__credential-provider-launcher"

// Exit codes of the launcher's own failures; any other is the provider's.
const (
	exitTimeout  = 124 // as timeout(1)
	exitTooLarge = 125
	// exitNotCredential: the provider printed something client-go would not
	// take as an ExecCredential; its decoding error would quote it.
	exitNotCredential = 126
	exitNotRun        = 127 // as a shell: the command could not be started
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

// minLife is the least client-go keeps a credential before it runs the
// provider again for its expiry: one that has expired already, or nearly,
// would otherwise be run for every request, and twice per fetch (once for
// the token, once for the certificate). It is counted from before the
// launcher exits, so it must outlast that, and client-go's decoding: a
// race-built launcher alone sleeps 1 s at exit.
const minLife = 5 * time.Second

// init runs the launcher when the process was started as one, before any
// main or TestMain: providers are started through os.Executable(), so a
// binary (or a test binary) that forgot to ask would run itself again, and
// its providers through itself, without end.
func init() { RunLauncherIfAsked() }

// RunLauncherIfAsked runs the launcher and exits when the process was
// started as one. The package's init already calls it; calling it again
// first in main says so where a reader looks.
func RunLauncherIfAsked() {
	if len(os.Args) > 1 && os.Args[1] == launcherArg {
		os.Exit(runLauncher(os.Args[2:], os.Stdout))
	}
}

// launcherArgs are client-go's exec args for provider p: the launcher's
// own (the ExecCredential's apiVersion, the timeout, the names of the
// variables in env to pass, the file where it notes the credential's
// expiry), then the provider's command, its args and extra.
func launcherArgs(p *Provider, env []clientcmdapi.ExecEnvVar, extra []string, expiryFile string) []string {
	names := make([]string, len(env))
	for i, e := range env {
		names[i] = e.Name
	}
	out := []string{launcherArg, p.Exec.APIVersion, p.timeout.String(), strings.Join(names, ","), expiryFile, "--", p.Exec.Command}
	out = append(out, p.Exec.Args...)
	return append(out, extra...)
}

func runLauncher(args []string, stdout io.Writer) int {
	if len(args) < 6 || args[4] != "--" {
		return exitNotRun
	}
	gv, err := schema.ParseGroupVersion(args[0])
	if err != nil {
		return exitNotRun
	}
	timeout, err := time.ParseDuration(args[1])
	if err != nil {
		return exitNotRun
	}
	expiryFile := args[3]
	env := []string{}
	for _, name := range append(strings.Split(args[2], ","), execInfoEnv) {
		if v, ok := os.LookupEnv(name); ok && name != "" {
			env = append(env, name+"="+v)
		}
	}
	raw, code := run(timeout, env, args[5], args[6:])
	if code != 0 {
		return code
	}
	cred, expires, ok := refreshEarly(raw, gv, time.Now())
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

// run runs command with env and returns its output, or the exit code
// that says why there is none. It is stopped at timeout, and whatever it
// started is killed and waited for when it ends.
func run(timeout time.Duration, env []string, command string, args []string) ([]byte, int) {
	if becomeSubreaper() != nil {
		return nil, exitNotRun // its descendants could not be stopped
	}
	// The launcher reads the pipe itself, so that waiting for the command
	// is not waiting for whoever else holds its stdout: they are killed
	// once the command ended, and the pipe closes with them.
	r, w, err := os.Pipe()
	if err != nil {
		return nil, exitNotRun
	}
	defer r.Close()
	cmd := exec.Command(command, args...)
	cmd.Env, cmd.Stdout = env, w // stdin and stderr: /dev/null
	// Its own process group, killed as a whole at the timeout. It dies
	// with the launcher.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	_ = w.Close()
	if err != nil {
		return nil, exitNotRun
	}
	type output struct {
		data []byte
		err  error
	}
	read := make(chan output, 1)
	go func() {
		data, err := io.ReadAll(io.LimitReader(r, maxOutput+1))
		if len(data) > maxOutput {
			_ = r.Close() // the provider's next write fails
		}
		read <- output{data, err}
	}()
	timedOut := make(chan struct{})
	timer := time.AfterFunc(timeout, func() {
		close(timedOut)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	})
	err = cmd.Wait()
	timer.Stop()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // what it left running in its group ...
	reapDescendants()                                   // ... and outside it
	var out output
	select {
	case out = <-read:
	case <-time.After(time.Second): // a writer outlived reapBound
		_ = r.Close()
		out = <-read
	}
	select {
	case <-timedOut:
		return nil, exitTimeout
	default:
	}
	var exit *exec.ExitError
	switch {
	case len(out.data) > maxOutput:
		return nil, exitTooLarge
	case errors.As(err, &exit):
		if code := exit.ExitCode(); code > 0 {
			return nil, code
		}
		return nil, 128 + int(syscall.SIGKILL) // killed by a signal
	case err != nil:
		return nil, exitNotRun
	case out.err != nil:
		return nil, exitNotCredential // its output could not be read whole
	}
	return out.data, 0
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

// refreshEarly is the ExecCredential client-go gets for a provider's
// output raw: the credential decoded as client-go decodes it (see
// decodeCredential), its expirationTimestamp moved to refreshAt of its
// remaining life (at least minLife from now), encoded by the launcher.
// expires is the original expiry (zero: none). ok is false when client-go
// would fail on raw: nothing of it is passed on, for client-go's error
// would quote it, and log it after a 401.
func refreshEarly(raw []byte, gv schema.GroupVersion, now time.Time) (cred []byte, expires time.Time, ok bool) {
	st, ok := decodeCredential(raw, gv)
	if !ok {
		return nil, time.Time{}, false
	}
	if st.ExpirationTimestamp != nil {
		expires = st.ExpirationTimestamp.Time
		// The wire has whole seconds: the moved expiry is rounded down
		// (earlier) as it is encoded, the least life up here.
		at := now.Add(expires.Sub(now) * refreshNum / refreshDen)
		if least := now.Add(minLife + time.Second - 1).Truncate(time.Second); at.Before(least) {
			at = least
		}
		st.ExpirationTimestamp = &metav1.Time{Time: at}
	}
	cred, err := runtime.Encode(execCodecs.LegacyCodec(gv), &clientauthentication.ExecCredential{Status: st})
	if err != nil {
		return nil, time.Time{}, false
	}
	return cred, expires, true
}

// execCodecs decode and encode ExecCredentials as client-go's exec
// package does (its own scheme and codec factory).
var execCodecs = func() serializer.CodecFactory {
	scheme := runtime.NewScheme()
	install.Install(scheme)
	return serializer.NewCodecFactory(scheme)
}()

// decodeCredential is the status of the ExecCredential raw (of version
// gv), and ok whether client-go would take it: its decoding of a plugin's
// output (k8s.io/client-go/plugin/pkg/client/auth/exec, refreshCredsLocked)
// and every check it makes after, client certificate and key included.
// It is the one place the provider's output is parsed.
func decodeCredential(raw []byte, gv schema.GroupVersion) (status *clientauthentication.ExecCredentialStatus, ok bool) {
	// Bounded first: client-go's YAML decoding would expand aliases.
	js, err := boundedyaml.ToJSON(raw, outputLimits)
	if err != nil {
		return nil, false
	}
	cred := &clientauthentication.ExecCredential{}
	_, gvk, err := execCodecs.UniversalDecoder(gv).Decode(js, nil, cred)
	if err != nil || gvk.Group != gv.Group || gvk.Version != gv.Version {
		return nil, false
	}
	st := cred.Status
	switch {
	case st == nil:
		return nil, false
	case st.Token == "" && st.ClientCertificateData == "" && st.ClientKeyData == "":
		return nil, false
	case (st.ClientCertificateData == "") != (st.ClientKeyData == ""):
		return nil, false
	case st.ClientCertificateData != "":
		cert, err := tls.X509KeyPair([]byte(st.ClientCertificateData), []byte(st.ClientKeyData))
		if err != nil {
			return nil, false
		}
		if _, err := x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, false
		}
	}
	return st, true
}
