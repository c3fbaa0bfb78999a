package localenv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A race report in any gateway log is found, under its log's path, also
// when a clean start was appended after it; a clean log adds nothing, and a
// log that cannot be read is named.
func TestDataRaces(t *testing.T) {
	dir := t.TempDir()
	clean := filepath.Join(dir, "cluster-gateway.log")
	replica := filepath.Join(dir, "cluster-gateway-b.log")
	missing := filepath.Join(dir, "cluster-gateway-c.log")
	write := func(path, s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(clean, "==== start\nI serving\n==== restart\nI serving\n")
	write(replica, "==== start\nI serving\n"+fakeRaceReport+"==== restart\nI serving\n")

	if got := DataRaces([]string{clean}); got != "" {
		t.Errorf("a clean log: %q, want nothing", got)
	}
	got := DataRaces([]string{clean, replica})
	if !strings.Contains(got, "--- "+replica+":\n"+raceMarker) || strings.Contains(got, clean) {
		t.Errorf("the second replica's report, before a restart: got\n%s\nwant its report under %s only", got, replica)
	}
	if got := DataRaces([]string{missing}); !strings.Contains(got, missing) {
		t.Errorf("a log that cannot be read: %q, want it named", got)
	}
}

// GatewayLogs names the log of every gateway process started: the
// environment's gateway and a replica, each once, though the replica was
// restarted; a race the replica reported before its restart is still found
// in them. The "gateway" is this test binary (fakeGateway), started
// through the same code as StartGateway's and StartReplica's.
func TestGatewayLogsNameEveryGateway(t *testing.T) {
	state := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e := &Env{Options: Options{StateDir: state, BinDir: state, GatewayBin: self, StartTimeout: time.Minute, Logf: t.Logf}}
	if err := e.resetState(); err != nil {
		t.Fatal(err)
	}
	e.spawn = newSpawner()
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Error(err)
		}
	})
	e.Hub = &Cluster{} // no client certificate: the fake gateway asks for none
	if e.Gateway, err = e.newGateway(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	t.Setenv(fakeGatewayEnv, "clean")
	if err := e.startGatewayProcess(ctx, e.Gateway, "cluster-gateway", nil); err != nil {
		t.Fatal(err)
	}
	t.Setenv(fakeGatewayEnv, "race")
	b, err := e.StartReplica(ctx, "cluster-gateway-b", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(fakeGatewayEnv, "clean")
	if err := e.RestartReplica(ctx, b, "cluster-gateway-b", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := e.StopReplica(b, 10*time.Second); err != nil {
		t.Fatal(err)
	}

	logs := e.GatewayLogs()
	want := []string{filepath.Join(state, "logs", "cluster-gateway.log"), filepath.Join(state, "logs", "cluster-gateway-b.log")}
	if !slices.Equal(logs, want) {
		t.Fatalf("GatewayLogs() = %q, want %q", logs, want)
	}
	races := DataRaces(logs)
	if !strings.Contains(races, "--- "+want[1]+":\n"+raceMarker) || strings.Contains(races, want[0]) {
		t.Fatalf("DataRaces(GatewayLogs()) = %q, want the replica's report before its restart, and only that", races)
	}
	if log, _ := os.ReadFile(want[1]); strings.Count(string(log), "==== ") != 2 {
		t.Fatalf("the replica's log does not hold both of its starts:\n%s", log)
	}
}

// fakeGatewayEnv, set in the environment of this test binary, makes it a
// fake gateway (see TestMain): its value is the mode of fakeGateway.
const fakeGatewayEnv = "LOCALENV_TEST_FAKE_GATEWAY"

const fakeRaceReport = "==================\n" + raceMarker + "\nWrite at 0x00c000123456 by goroutine 7:\n  main.fake()\n==================\n"

// fakeGateway stands in for cluster-gateway: it serves /readyz over TLS on
// --bind-address:--secure-port with --tls-cert-file and
// --tls-private-key-file until SIGTERM. In mode "race" it first writes a
// race detector's report to stderr, as a gateway built with -race does.
func fakeGateway(mode string, args []string) int {
	flags := map[string]string{}
	for _, a := range args {
		if k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "="); ok {
			flags[k] = v
		}
	}
	if mode == "race" {
		fmt.Fprint(os.Stderr, fakeRaceReport)
	}
	cert, err := tls.LoadX509KeyPair(flags["tls-cert-file"], flags["tls-private-key-file"])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(flags["bind-address"], flags["secure-port"]))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") }),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}},
		ReadHeaderTimeout: 10 * time.Second,
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ServeTLS(ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Fprintln(os.Stderr, "fake gateway: stopped")
	return 0
}
