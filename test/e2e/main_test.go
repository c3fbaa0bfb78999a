// Package e2e runs the gateway against real components: one environment of
// hack/localenv (etcd, hub and managed kube-apiservers, fake kubelets, the
// gateway) is brought up once for all tests in TestMain.
//
// Environment variables:
//
//	KUBE_BIN          directory with etcd, kube-apiserver, kubectl, cluster-gateway (default ../../_output/bin)
//	E2E_STATE_DIR     where PKI, logs and kubeconfigs go (default: a new temp dir, removed after a passing run)
//	E2E_SKIP_GATEWAY  if set, run without the gateway (only tests that do not need it pass)
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
)

// env is the environment shared by all tests. Tests must not stop it; to
// run the gateway with other flags use env.StopGateway/env.StartGateway.
var env *localenv.Env

// testIP is where tests listen for servers of their own that a gateway
// dials. Not 127.0.0.1: the suite's gateway denies that address (and ::1),
// so that "localhost" tests its endpoint policy after name resolution.
const testIP = "127.0.0.251"

// gatewayArgs are the suite's gateway flags beyond localenv's.
var gatewayArgs = []string{
	// A dial timeout well under the request timeout, so an unreachable
	// cluster is reported as such (503), not as a request timeout.
	"--dial-timeout=3s",
	"--endpoint-deny-cidrs=169.254.0.0/16,fe80::/10,fd00:ec2::254/128,127.0.0.1/32,::1/128",
	// Probe often, so reachability changes show within seconds.
	"--probe-interval=1s", "--probe-timeout=2s", "--probe-failure-threshold=2", "--probe-max-backoff=4s",
	// Longer than the request timeout, which cuts ordinary requests first.
	"--upstream-response-header-timeout=" + upstreamHeaderTimeout.String(),
}

// upstreamHeaderTimeout is the suite gateway's --upstream-response-header-timeout.
const upstreamHeaderTimeout = 15 * time.Second

// hubRequestTimeout is the hub's and the gateway's --request-timeout: small,
// so tests of "ordinary requests are still cut" do not wait a minute.
const hubRequestTimeout = 10 * time.Second

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	bin := os.Getenv("KUBE_BIN")
	if bin == "" {
		bin = filepath.Join("..", "..", "_output", "bin")
	}
	skipGateway := os.Getenv("E2E_SKIP_GATEWAY") != ""
	if err := localenv.CheckBinaries(bin, !skipGateway); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: cannot run:\n%v\n(or set KUBE_BIN to a directory that has them; E2E_SKIP_GATEWAY=1 runs without the gateway)\n", err)
		return 1
	}
	stateDir, tmp := os.Getenv("E2E_STATE_DIR"), false
	if stateDir == "" {
		d, err := os.MkdirTemp("", "cluster-gateway-e2e-")
		if err != nil {
			fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
			return 1
		}
		stateDir, tmp = d, true
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "e2e: "+format+"\n", args...)
	}
	e, err := localenv.Start(context.Background(), localenv.Options{
		StateDir:          stateDir,
		BinDir:            bin,
		HubRequestTimeout: hubRequestTimeout,
		GatewayArgs:       gatewayArgs,
		GatewayBin:        os.Getenv("GATEWAY_BIN"),
		SkipGateway:       skipGateway,
		Logf:              logf,
	})
	if err != nil {
		logf("environment failed to start: %v\nlogs are in %s", err, filepath.Join(stateDir, "logs"))
		return 1
	}
	env = e

	code := m.Run()

	if err := env.Stop(); err != nil {
		logf("stopping the environment: %v", err)
		if code == 0 {
			code = 1
		}
	}
	// `make test` runs a gateway built with -race: a race anywhere in its
	// request path, under all of the suite's traffic, fails the suite. Every
	// gateway process a test started counts: replicas, and gateways
	// restarted with other flags (a restart appends to its log).
	if races := localenv.DataRaces(env.GatewayLogs()); races != "" {
		logf("a gateway reported data races:\n%s", races)
		if code == 0 {
			code = 1
		}
	}
	if code == 0 && tmp {
		_ = os.RemoveAll(stateDir)
	} else {
		logf("state, logs and kubeconfigs kept in %s", stateDir)
	}
	return code
}

// requireGateway skips tests that need the gateway when it is not running.
func requireGateway(t *testing.T) {
	t.Helper()
	if env.Gateway.Process == nil {
		t.Skip("gateway not running (E2E_SKIP_GATEWAY)")
	}
}
