package localenv

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

func (k *Konnectivity) path(name string) string { return filepath.Join(k.dir, name) }

func (k *Konnectivity) buildServerArgs() {
	k.serverArgs = []string{
		"--mode=grpc", "--proxy-strategies=destHost,default", "--uds-name=",
		"--server-bind-address=127.0.0.1", "--server-port=" + strconv.Itoa(k.ServerPort),
		"--agent-bind-address=127.0.0.1", "--agent-port=" + strconv.Itoa(k.AgentPort),
		"--admin-bind-address=127.0.0.1", "--admin-port=" + strconv.Itoa(k.AdminPort),
		"--health-bind-address=127.0.0.1", "--health-port=" + strconv.Itoa(k.HealthPort),
		// --server-ca-cert verifies the gateway's client certs.
		"--server-ca-cert=" + k.ClientCA.CertFile, "--server-cert=" + k.path("server.crt"), "--server-key=" + k.path("server.key"),
		"--cluster-ca-cert=" + k.AgentCA.CertFile, "--cluster-cert=" + k.path("cluster.crt"), "--cluster-key=" + k.path("cluster.key"),
		"--v=2",
	}
}

func (k *Konnectivity) agentArgs() []string {
	return []string{
		"--proxy-server-host=127.0.0.1", "--proxy-server-port=" + strconv.Itoa(k.AgentPort),
		"--ca-cert=" + k.AgentCA.CertFile, "--agent-cert=" + k.path("agent.crt"), "--agent-key=" + k.path("agent.key"),
		// destHost routes dials to the cluster's IP to this agent.
		"--agent-identifiers=ipv4=" + k.Cluster.IP,
		"--admin-bind-address=127.0.0.1", "--admin-server-port=" + strconv.Itoa(k.AgentAdminPort),
		"--health-server-host=127.0.0.1", "--health-server-port=" + strconv.Itoa(k.AgentHealthPort),
		// Reconnect within a second of a proxy-server restart.
		"--sync-interval=200ms", "--sync-interval-cap=1s", "--probe-interval=200ms", "--v=2",
	}
}

// startKonnectivity starts the proxy-server and the agent and waits until
// the agent is connected. Ports taken meanwhile by someone else are
// replaced, up to three attempts.
func (e *Env) startKonnectivity(ctx context.Context) error {
	k := e.Konnectivity
	for attempt := 1; ; attempt++ {
		k.buildServerArgs()
		err := e.konnectivityUp(ctx)
		if err == nil {
			return nil
		}
		inUse := k.Server != nil && k.Server.addrInUse() || k.Agent != nil && k.Agent.addrInUse()
		if !inUse || attempt == 3 {
			return err
		}
		_ = k.Agent.Kill()
		_ = k.Server.Kill()
		ports := make([]int, 6)
		for i := range ports {
			if ports[i], err = freePort("127.0.0.1"); err != nil {
				return err
			}
		}
		k.setPorts(ports)
	}
}

func (e *Env) konnectivityUp(ctx context.Context) error {
	k := e.Konnectivity
	var err error
	if k.Server, err = e.start("proxy-server", "proxy-server", k.serverArgs...); err != nil {
		return err
	}
	if k.Agent, err = e.start("proxy-agent", "proxy-agent", k.agentArgs()...); err != nil {
		return err
	}
	return k.waitServerReady(ctx)
}

// waitServerReady waits for the proxy-server's /readyz, which needs an agent.
func (k *Konnectivity) waitServerReady(ctx context.Context) error {
	client := &http.Client{Timeout: 2 * time.Second}
	url := "http://" + hostPort("127.0.0.1", k.HealthPort) + "/readyz"
	var last error
	for {
		if last = httpOK(ctx, client, url); last == nil {
			return nil
		}
		select {
		case <-k.Server.Done():
			return k.Server.exitError()
		case <-k.Agent.Done():
			return k.Agent.exitError()
		case <-ctx.Done():
			return fmt.Errorf("proxy-server has no connected proxy-agent (last error: %v); see %s and %s", last, k.Server.LogPath, k.Agent.LogPath)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// StopKonnectivityServer stops the proxy-server (a no-op if it already
// exited, e.g. after a test killed it by pid). The agent keeps running and
// reconnects once StartKonnectivityServer brings it back.
func (e *Env) StopKonnectivityServer() error {
	if e.Konnectivity == nil || e.Konnectivity.Server == nil {
		return nil
	}
	return e.Konnectivity.Server.stopTwice()
}

// StartKonnectivityServer starts the proxy-server again on the same ports
// and waits until the agent has reconnected to it.
func (e *Env) StartKonnectivityServer(ctx context.Context) error {
	k := e.Konnectivity
	if k == nil {
		return fmt.Errorf("konnectivity is off (Options.NoKonnectivity)")
	}
	if k.Server != nil && !k.Server.Exited() {
		return fmt.Errorf("proxy-server already running (pid %d); call StopKonnectivityServer first", k.Server.Pid())
	}
	p, err := e.start("proxy-server", "proxy-server", k.serverArgs...)
	if err != nil {
		return err
	}
	k.Server = p
	ctx, cancel := context.WithTimeout(ctx, e.StartTimeout)
	defer cancel()
	return k.waitServerReady(ctx)
}

// stop ends the agent before the rest: it drains on the first SIGTERM and
// exits only on a second, so the usual SIGTERM-then-wait would cost the grace.
func (k *Konnectivity) stop() error {
	var err error
	if k.Agent != nil {
		err = k.Agent.stopTwice()
	}
	if k.Cluster.Kubelet != nil {
		if kerr := k.Cluster.Kubelet.Close(); err == nil {
			err = kerr
		}
	}
	return err
}

// stopTwice sends SIGTERM twice (konnectivity binaries exit on the second),
// then SIGKILL, to the process group.
func (p *Process) stopTwice() error {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGTERM} {
		if p.Exited() {
			return nil
		}
		_ = syscall.Kill(-p.Pid(), sig)
		select {
		case <-p.done:
			return nil
		case <-time.After(500 * time.Millisecond):
		}
	}
	return p.Kill()
}
