package localenv

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/clustergateway/cluster-gateway/internal/testbalancer"
)

func (k *Konnectivity) path(name string) string { return filepath.Join(k.dir, name) }

func (k *Konnectivity) buildServerArgs() {
	for _, p := range k.Servers {
		p.args = []string{
			"--mode=grpc", "--proxy-strategies=destHost,default", "--uds-name=",
			// The agent holds a connection to each of --server-count servers.
			"--server-id=" + p.ID, "--server-count=" + strconv.Itoa(len(k.Servers)),
			"--server-bind-address=127.0.0.1", "--server-port=" + strconv.Itoa(p.ServerPort),
			"--agent-bind-address=127.0.0.1", "--agent-port=" + strconv.Itoa(p.AgentPort),
			"--admin-bind-address=127.0.0.1", "--admin-port=" + strconv.Itoa(p.AdminPort),
			"--health-bind-address=127.0.0.1", "--health-port=" + strconv.Itoa(p.HealthPort),
			// --server-ca-cert verifies the gateway's client certs.
			"--server-ca-cert=" + k.ClientCA.CertFile, "--server-cert=" + k.path("server.crt"), "--server-key=" + k.path("server.key"),
			"--cluster-ca-cert=" + k.AgentCA.CertFile, "--cluster-cert=" + k.path("cluster.crt"), "--cluster-key=" + k.path("cluster.key"),
			"--v=2",
		}
	}
}

func (k *Konnectivity) agentArgs() []string {
	port := k.Servers[0].AgentPort
	if k.AgentBalancer != nil {
		port = k.AgentBalancer.Port() // one address for all proxy-servers, as a Service would be
	}
	return []string{
		"--proxy-server-host=127.0.0.1", "--proxy-server-port=" + strconv.Itoa(port),
		"--ca-cert=" + k.AgentCA.CertFile, "--agent-cert=" + k.path("agent.crt"), "--agent-key=" + k.path("agent.key"),
		// destHost routes dials to the cluster's IP to this agent.
		"--agent-identifiers=ipv4=" + k.Cluster.IP,
		"--admin-bind-address=127.0.0.1", "--admin-server-port=" + strconv.Itoa(k.AgentAdminPort),
		"--health-server-host=127.0.0.1", "--health-server-port=" + strconv.Itoa(k.AgentHealthPort),
		// Reconnect within a second of a proxy-server restart.
		"--sync-interval=200ms", "--sync-interval-cap=1s", "--probe-interval=200ms", "--v=2",
	}
}

// startKonnectivity starts the proxy-servers, the balancer and the agent,
// and waits until the agent is connected to every proxy-server. Ports taken
// meanwhile by someone else are replaced, up to three attempts.
func (e *Env) startKonnectivity(ctx context.Context) error {
	k := e.Konnectivity
	for attempt := 1; ; attempt++ {
		k.buildServerArgs()
		err := e.konnectivityUp(ctx)
		if err == nil {
			return nil
		}
		inUse := k.Agent != nil && k.Agent.addrInUse()
		for _, p := range k.Servers {
			inUse = inUse || p.Process != nil && p.Process.addrInUse()
		}
		if !inUse || attempt == 3 {
			return err
		}
		_ = k.Agent.Kill()
		for _, p := range k.Servers {
			if p.Process != nil {
				_ = p.Process.Kill()
			}
		}
		if k.AgentBalancer != nil {
			k.AgentBalancer.Close()
			k.AgentBalancer = nil
		}
		if err := k.newPorts(); err != nil {
			return err
		}
	}
}

func (e *Env) konnectivityUp(ctx context.Context) error {
	k := e.Konnectivity
	var agentPorts []string
	for _, p := range k.Servers {
		agentPorts = append(agentPorts, hostPort("127.0.0.1", p.AgentPort))
	}
	if len(k.Servers) > 1 { // one proxy-server: the agent dials it, with no hop in this process
		b, err := testbalancer.Listen("127.0.0.1", agentPorts...)
		if err != nil {
			return err
		}
		k.AgentBalancer = b
		b.Start()
	}
	var err error
	for _, p := range k.Servers {
		if p.Process, err = e.start(p.ID, "proxy-server", p.args...); err != nil {
			return err
		}
	}
	if k.Agent, err = e.start("proxy-agent", "proxy-agent", k.agentArgs()...); err != nil {
		return err
	}
	for _, p := range k.Servers {
		if err := k.waitServerReady(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// waitServerReady waits for the proxy-server's /readyz, which needs an agent.
func (k *Konnectivity) waitServerReady(ctx context.Context, p *ProxyServer) error {
	client := &http.Client{Timeout: 2 * time.Second}
	url := "http://" + hostPort("127.0.0.1", p.HealthPort) + "/readyz"
	var last error
	for {
		if last = httpOK(ctx, client, url); last == nil {
			return nil
		}
		select {
		case <-p.Process.Done():
			return p.Process.exitError()
		case <-k.Agent.Done():
			return k.Agent.exitError()
		case <-ctx.Done():
			return fmt.Errorf("%s has no connected proxy-agent (last error: %v); see %s and %s", p.ID, last, p.Process.LogPath, k.Agent.LogPath)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// StopKonnectivityServer stops proxy-server i (a no-op if it already
// exited, e.g. after a test killed it by pid). The agent keeps running and
// reconnects once StartKonnectivityServer brings it back.
func (e *Env) StopKonnectivityServer(i int) error {
	if e.Konnectivity == nil || e.Konnectivity.Servers[i].Process == nil {
		return nil
	}
	return e.Konnectivity.Servers[i].Process.stopTwice()
}

// StartKonnectivityServer starts proxy-server i again on the same ports and
// waits until the agent has reconnected to it.
func (e *Env) StartKonnectivityServer(ctx context.Context, i int) error {
	k := e.Konnectivity
	if k == nil {
		return fmt.Errorf("konnectivity is off (Options.NoKonnectivity)")
	}
	p := k.Servers[i]
	if p.Process != nil && !p.Process.Exited() {
		return fmt.Errorf("%s already running (pid %d); call StopKonnectivityServer first", p.ID, p.Process.Pid())
	}
	proc, err := e.start(p.ID, "proxy-server", p.args...)
	if err != nil {
		return err
	}
	p.Process = proc
	ctx, cancel := context.WithTimeout(ctx, e.StartTimeout)
	defer cancel()
	return k.waitServerReady(ctx, p)
}

// stop ends the agent before the rest: it drains on the first SIGTERM and
// exits only on a second, so the usual SIGTERM-then-wait would cost the grace.
func (k *Konnectivity) stop() error {
	var err error
	if k.Agent != nil {
		err = k.Agent.stopTwice()
	}
	if k.AgentBalancer != nil {
		k.AgentBalancer.Close()
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
