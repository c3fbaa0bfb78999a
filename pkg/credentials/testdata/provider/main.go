// Command provider is a credential provider for the tests: it prints an
// ExecCredential from files the test rewrites, and can write its
// environment to a file.
//
//	PROVIDER_ENV_DUMP     write the whole environment there first (NUL-separated)
//	PROVIDER_RUNS         append a line to this file first, one per run
//	PROVIDER_DAEMON       leave a daemon behind: a grandchild that calls
//	                      setsid and sleeps, its pid written to this file
//	                      before the provider goes on (see daemon)
//	PROVIDER_DAEMON_MODE  doublefork (default): the daemon's parent exits at
//	                      once; setsid: the provider's own child is the
//	                      daemon; stdout: as doublefork, and the daemon
//	                      keeps the provider's stdout open
//	PROVIDER_SLEEP        sleep this long (a Go duration) before answering
//	PROVIDER_EXIT         exit with this code instead of answering
//	PROVIDER_OUTPUT       print this file's content verbatim instead of an
//	                      ExecCredential of its own
//	PROVIDER_TOKEN        the token (a literal; %d is the run's number, the
//	                      lines in PROVIDER_RUNS)
//	PROVIDER_TOKEN_FILE   a file that holds the token (read each run)
//	PROVIDER_TOKEN_ECHO   set: the token is what ran, as JSON: {"args":
//	                      its args, "env": its environment but
//	                      KUBERNETES_EXEC_INFO}
//	PROVIDER_CERT_FILE    a client certificate (PEM) ...
//	PROVIDER_KEY_FILE     ... and its key (PEM)
//	PROVIDER_EXPIRED      set: the credential has expired already
//	PROVIDER_EXPIRES      the expirationTimestamp (RFC 3339), or a file
//	                      (an absolute path) that holds it; empty: none
//	PROVIDER_LIFETIME     the expirationTimestamp is this long (a Go
//	                      duration) from now, with fractional seconds
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 2 && os.Args[1] == "daemon" {
		daemon(os.Args[2], os.Args[3])
		return
	}
	if p := os.Getenv("PROVIDER_ENV_DUMP"); p != "" {
		if err := os.WriteFile(p, []byte(strings.Join(os.Environ(), "\x00")), 0o600); err != nil {
			fail(err)
		}
	}
	run := 0
	if f := os.Getenv("PROVIDER_RUNS"); f != "" {
		run = appendRun(f)
	}
	if f := os.Getenv("PROVIDER_DAEMON"); f != "" {
		startDaemon(f, os.Getenv("PROVIDER_DAEMON_MODE"))
	}
	if d := os.Getenv("PROVIDER_SLEEP"); d != "" {
		dur, err := time.ParseDuration(d)
		if err != nil {
			fail(err)
		}
		time.Sleep(dur)
	}
	if c := os.Getenv("PROVIDER_EXIT"); c != "" {
		code, err := strconv.Atoi(c)
		if err != nil {
			fail(err)
		}
		os.Exit(code)
	}
	if f := os.Getenv("PROVIDER_OUTPUT"); f != "" {
		raw, err := os.ReadFile(f)
		if err != nil {
			fail(err)
		}
		if _, err := os.Stdout.Write(raw); err != nil {
			fail(err)
		}
		return
	}
	status := map[string]string{}
	if t := os.Getenv("PROVIDER_TOKEN"); t != "" {
		status["token"] = strings.ReplaceAll(t, "%d", strconv.Itoa(run))
	}
	if f := os.Getenv("PROVIDER_TOKEN_FILE"); f != "" {
		raw, err := os.ReadFile(f)
		if err != nil {
			fail(err)
		}
		status["token"] = strings.TrimSpace(string(raw))
	}
	if os.Getenv("PROVIDER_TOKEN_ECHO") != "" {
		env := map[string]string{}
		for _, kv := range os.Environ() {
			k, v, _ := strings.Cut(kv, "=")
			if k != "KUBERNETES_EXEC_INFO" {
				env[k] = v
			}
		}
		raw, err := json.Marshal(map[string]interface{}{"args": append([]string{}, os.Args[1:]...), "env": env})
		if err != nil {
			fail(err)
		}
		status["token"] = string(raw)
	}
	if c := os.Getenv("PROVIDER_CERT_FILE"); c != "" {
		cert, err := os.ReadFile(c)
		if err != nil {
			fail(err)
		}
		key, err := os.ReadFile(os.Getenv("PROVIDER_KEY_FILE"))
		if err != nil {
			fail(err)
		}
		status["clientCertificateData"], status["clientKeyData"] = string(cert), string(key)
	}
	if e := os.Getenv("PROVIDER_EXPIRES"); strings.HasPrefix(e, "/") {
		raw, err := os.ReadFile(e)
		if err != nil {
			fail(err)
		}
		if ts := strings.TrimSpace(string(raw)); ts != "" {
			status["expirationTimestamp"] = ts
		}
	} else if e != "" {
		status["expirationTimestamp"] = e
	}
	if d := os.Getenv("PROVIDER_LIFETIME"); d != "" {
		dur, err := time.ParseDuration(d)
		if err != nil {
			fail(err)
		}
		status["expirationTimestamp"] = time.Now().Add(dur).UTC().Format(time.RFC3339Nano)
	}
	if os.Getenv("PROVIDER_EXPIRED") != "" {
		status["expirationTimestamp"] = "2000-01-01T00:00:00Z"
	}
	err := json.NewEncoder(os.Stdout).Encode(map[string]interface{}{
		"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": status,
	})
	if err != nil {
		fail(err)
	}
}

// appendRun notes one run in file and returns its number.
func appendRun(file string) int {
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		fail(err)
	}
	if _, err := f.WriteString(strconv.Itoa(os.Getpid()) + "\n"); err != nil {
		fail(err)
	}
	if err := f.Close(); err != nil {
		fail(err)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		fail(err)
	}
	return strings.Count(string(raw), "\n")
}

// startDaemon starts a process that leaves the provider's process group
// and session (setsid) and returns once it wrote its pid to pidFile.
func startDaemon(pidFile, mode string) {
	stage := "grandchild-parent"
	if mode == "setsid" {
		stage = "daemon"
	}
	cmd := exec.Command(os.Args[0], "daemon", pidFile, stage)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if mode == "stdout" {
		cmd.Stdout = os.Stdout
		cmd.Args[3] = "grandchild-parent-stdout"
	}
	if err := cmd.Start(); err != nil {
		fail(err)
	}
	if stage == "grandchild-parent" || mode == "stdout" {
		if err := cmd.Wait(); err != nil { // the daemon's parent exits at once: a double fork
			fail(err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if raw, err := os.ReadFile(pidFile); err == nil && len(raw) > 0 {
			return
		}
		if time.Now().After(deadline) {
			fail(fmt.Errorf("the daemon did not write %s", pidFile))
		}
	}
}

// daemon is the provider run as "daemon PIDFILE STAGE": the first stage
// of a double fork starts the second and exits; the daemon writes its pid
// and sleeps.
func daemon(pidFile, stage string) {
	switch stage {
	case "grandchild-parent", "grandchild-parent-stdout":
		cmd := exec.Command(os.Args[0], "daemon", pidFile, "daemon")
		if stage == "grandchild-parent-stdout" {
			cmd.Stdout = os.Stdout
		}
		if err := cmd.Start(); err != nil {
			fail(err)
		}
		return // without waiting: the daemon is orphaned
	}
	tmp := filepath.Join(filepath.Dir(pidFile), ".pid-"+strconv.Itoa(os.Getpid()))
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		fail(err)
	}
	if err := os.Rename(tmp, pidFile); err != nil {
		fail(err)
	}
	time.Sleep(time.Hour)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
