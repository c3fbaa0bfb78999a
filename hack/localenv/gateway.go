package localenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// Gateway is the cluster-gateway process, running on 127.0.0.1 as the
// cluster-gateway ServiceAccount of the hub.
type Gateway struct {
	Port       int
	URL        string   // https://127.0.0.1:Port
	CA         *CA      // signs Serving; the APIService caBundle
	Serving    *KeyPair // SANs cluster-gateway.cluster-gateway-system.svc, localhost, 127.0.0.1
	Kubeconfig string   // hub, as the ServiceAccount (token)
	Token      string
	Process    *Process // nil while stopped
	Args       []string // flags of the running process

	extraArgs []string // what was added to the standard flags, for a restart
}

const (
	GatewayNamespace = "cluster-gateway-system"
	APIServiceName   = "v1alpha1.gateway.clustergateway.io"
)

func (e *Env) newGateway() (*Gateway, error) {
	dir := filepath.Join(e.StateDir, "pki", "gateway")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	g := &Gateway{Kubeconfig: filepath.Join(e.StateDir, "gateway.kubeconfig")}
	var err error
	if g.CA, err = newCA(dir, "ca"); err != nil {
		return nil, err
	}
	if g.Serving, err = g.CA.issue(dir, "serving", certSpec{
		CommonName: "cluster-gateway",
		DNSNames:   []string{"cluster-gateway.cluster-gateway-system.svc", "localhost"},
		IPs:        []string{"127.0.0.1"},
		Server:     true,
	}); err != nil {
		return nil, err
	}
	// The Service and APIService name it; StartGateway moves it (and them)
	// only if another socket took it meanwhile.
	if g.Port, err = freePort("127.0.0.1"); err != nil {
		return nil, err
	}
	g.URL = "https://" + hostPort("127.0.0.1", g.Port)
	return g, nil
}

// writeGatewayKubeconfig gets a ServiceAccount token the way an operator
// would; TokenRequest needs no controller-manager, only the SA signing key.
func (e *Env) writeGatewayKubeconfig() error {
	out, err := e.Kubectl(e.Hub.Kubeconfig, "create", "token", "cluster-gateway", "-n", GatewayNamespace, "--duration=48h")
	if err != nil {
		return err
	}
	e.Gateway.Token = strings.TrimSpace(out)
	return writeKubeconfig(e.Gateway.Kubeconfig, "hub", e.Hub.URL, e.Hub.CA.CertPEM, nil, e.Gateway.Token)
}

// gatewayBin is the gateway binary built by `make build`.
func (e *Env) gatewayBin() string {
	if e.GatewayBin != "" {
		if abs, err := filepath.Abs(e.GatewayBin); err == nil {
			return abs
		}
		return e.GatewayBin
	}
	return filepath.Join(e.BinDir, "cluster-gateway")
}

// StartGateway starts the gateway with the standard flags plus extraArgs
// (or Options.GatewayArgs if extraArgs is nil), waits for its /readyz and for
// the hub to report the APIService Available.
//
// The gateway's port is chosen when the environment is made, long before a
// start, and any socket may take it meanwhile (a connection's ephemeral
// local port too: seen once, the gateway exiting with "address already in
// use"). Then the gateway moves to a new port, and the hub's Service and
// APIService are pointed there, up to twice.
func (e *Env) StartGateway(ctx context.Context, extraArgs []string) error {
	g := e.Gateway
	for attempt := 1; ; attempt++ {
		err := e.startGatewayProcess(ctx, g, "cluster-gateway", extraArgs)
		if err == nil {
			break
		}
		if attempt == 3 || g.Process == nil || !g.Process.addrInUse() {
			return err
		}
		port, perr := freePort("127.0.0.1")
		if perr != nil {
			return errors.Join(err, perr)
		}
		e.Logf("note: the gateway's port %d was taken before it could bind it; moving it to %d", g.Port, port)
		g.Port, g.URL = port, "https://"+hostPort("127.0.0.1", port)
		if err := e.applyServiceFor(port); err != nil {
			return err
		}
	}
	return e.waitHubServesGateway(ctx)
}

// StartReplica starts another gateway process, named name, on a port of its
// own with the same serving certificate, hub credentials and flags as
// StartGateway (extraArgs: see there), and waits for its /readyz. The hub
// does not route to it unless an APIService points there (PointAPIService).
// StopReplica stops it.
func (e *Env) StartReplica(ctx context.Context, name string, extraArgs []string) (*Gateway, error) {
	g := *e.Gateway
	g.Process, g.Args = nil, nil
	port, err := freePort("127.0.0.1")
	if err != nil {
		return nil, err
	}
	g.Port, g.URL = port, "https://"+hostPort("127.0.0.1", port)
	if err := e.startGatewayProcess(ctx, &g, name, extraArgs); err != nil {
		return nil, err
	}
	return &g, nil
}

// StopReplica stops a replica (SIGTERM, then SIGKILL after the grace) and
// waits for it to exit.
func (e *Env) StopReplica(g *Gateway, grace time.Duration) error {
	if g == nil || g.Process == nil {
		return nil
	}
	err := g.Process.Stop(grace)
	g.Process = nil
	return err
}

// RestartReplica stops g gracefully (SIGTERM, up to grace) and starts it
// again on its port with its flags, as a rolling update does to a pod.
func (e *Env) RestartReplica(ctx context.Context, g *Gateway, name string, grace time.Duration) error {
	args := g.extraArgs
	if err := e.StopReplica(g, grace); err != nil {
		return err
	}
	return e.startGatewayProcess(ctx, g, name, args)
}

// startGatewayProcess starts one gateway process for g and waits for its /readyz.
func (e *Env) startGatewayProcess(ctx context.Context, g *Gateway, name string, extraArgs []string) error {
	if g.Process != nil && !g.Process.Exited() {
		return fmt.Errorf("%s already running (pid %d); stop it first", name, g.Process.Pid())
	}
	if extraArgs == nil {
		extraArgs = e.GatewayArgs
	}
	timeout := e.GatewayRequestTimeout
	if timeout == 0 {
		timeout = e.HubRequestTimeout
	}
	args := []string{
		"--secure-port=" + strconv.Itoa(g.Port),
		"--bind-address=127.0.0.1",
		"--tls-cert-file=" + g.Serving.CertFile,
		"--tls-private-key-file=" + g.Serving.KeyFile,
		"--kubeconfig=" + g.Kubeconfig,
		"--authentication-kubeconfig=" + g.Kubeconfig,
		"--authorization-kubeconfig=" + g.Kubeconfig,
		"--secret-namespace=" + GatewayNamespace,
	}
	if timeout > 0 {
		args = append(args, "--request-timeout="+timeout.String())
	}
	args = append(args, e.konnectivityGatewayArgs()...)
	args = append(args, extraArgs...)
	p, err := e.start(name, e.gatewayBin(), args...)
	if err != nil {
		return err
	}
	e.noteGatewayLog(p.LogPath)
	g.Process, g.Args, g.extraArgs = p, args, extraArgs
	client, err := mtlsClient(g.CA.CertPEM, e.Hub.Admin)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, e.StartTimeout)
	defer cancel()
	return waitReady(ctx, p, name, func(ctx context.Context) error {
		return httpOK(ctx, client, g.URL+"/readyz")
	})
}

// PointAPIService points the hub's Service and APIService at port on
// loopback (a replica, or a balancer in front of replicas) and waits until
// the hub reaches the gateway there. PointAPIService(env.Gateway.Port)
// restores the environment's wiring.
func (e *Env) PointAPIService(ctx context.Context, port int) error {
	if err := e.applyServiceFor(port); err != nil {
		return err
	}
	return e.waitHubServesGateway(ctx)
}

// applyServiceFor applies the hub's Service and APIService for a gateway on
// port on loopback.
func (e *Env) applyServiceFor(port int) error {
	svc, err := e.serviceFilesFor(port)
	if err != nil {
		return err
	}
	_, err = e.Kubectl(e.Hub.Kubeconfig, append([]string{"apply"}, svc...)...)
	return err
}

// serviceFilesFor writes config/'s Service and APIService rewritten for a
// gateway on port on loopback, as kubectl's -f arguments.
func (e *Env) serviceFilesFor(port int) ([]string, error) {
	svc, err := e.rewrite("service.yaml", localService(port))
	if err != nil {
		return nil, err
	}
	apisvc, err := e.rewrite("apiservice.yaml", localAPIService(port, e.Gateway.CA.CertPEM))
	if err != nil {
		return nil, err
	}
	return []string{"-f", svc, "-f", apisvc}, nil
}

// waitHubReachesGateway waits until the hub admin can list ClusterGateways
// through the aggregator. Right after a restart the APIService may still say
// Available from before, and the gateway may answer /readyz before it has
// loaded the hub's request-header CA (hub requests then arrive as
// system:anonymous); this is logged, since a gateway should not be ready then.
func (e *Env) waitHubReachesGateway(ctx context.Context) error {
	client, err := e.Hub.HTTPClient()
	if err != nil {
		return err
	}
	url := e.Hub.URL + "/apis/gateway.clustergateway.io/v1alpha1/clustergateways"
	// The hub's availability controller retries a failed probe with backoff,
	// so after a restart it may still mark the APIService unavailable (and
	// answer 503) a second or two after a first success: wait until the hub
	// has reached the gateway without a failure for hubSettle.
	const hubSettle = 3 * time.Second
	var first error
	var okSince time.Time
	for {
		err := httpOK(ctx, client, url)
		switch {
		case err != nil:
			okSince = time.Time{}
			if first == nil {
				first = err
			}
		case okSince.IsZero():
			okSince = time.Now()
		case time.Since(okSince) >= hubSettle:
			if first != nil {
				e.Logf("note: the gateway was ready, but the hub could not use it at first: %v", first)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("hub cannot list ClusterGateways through the gateway: %v; see %s", err, e.gatewayLog())
		case <-e.gatewayDone():
			return e.Gateway.Process.exitError()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// StopGateway stops the gateway process (SIGTERM, then SIGKILL).
func (e *Env) StopGateway() error {
	if e.Gateway == nil || e.Gateway.Process == nil {
		return nil
	}
	err := e.Gateway.Process.Stop(stopGrace)
	e.Gateway.Process = nil
	return err
}

var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// waitAPIServiceAvailable waits until the hub's aggregator reaches the gateway.
func (e *Env) waitAPIServiceAvailable(ctx context.Context) error {
	dc, err := dynamic.NewForConfig(e.Hub.RESTConfig())
	if err != nil {
		return err
	}
	last := "not found"
	for {
		obj, err := dc.Resource(apiServiceGVR).Get(ctx, APIServiceName, metav1.GetOptions{})
		if err == nil {
			conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Available" {
					if m["status"] == "True" {
						return nil
					}
					last = fmt.Sprintf("Available=%v: %v: %v", m["status"], m["reason"], m["message"])
				}
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("APIService %s not Available (%s); check the gateway log %s and `kubectl --kubeconfig %s get apiservice %s -o yaml`",
				APIServiceName, last, e.gatewayLog(), e.Hub.Kubeconfig, APIServiceName)
		case <-e.gatewayDone():
			return e.Gateway.Process.exitError()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// gatewayDone is closed when the environment's gateway exits (never, while
// it is stopped and another process serves the APIService).
func (e *Env) gatewayDone() <-chan struct{} {
	if e.Gateway.Process == nil {
		return nil
	}
	return e.Gateway.Process.Done()
}

func (e *Env) gatewayLog() string {
	return filepath.Join(e.StateDir, "logs", "cluster-gateway*.log")
}

// waitHubServesGateway waits, within StartTimeout, until the hub reports the
// APIService Available and its requests reach the gateway.
func (e *Env) waitHubServesGateway(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, e.StartTimeout)
	defer cancel()
	if err := e.waitAPIServiceAvailable(ctx); err != nil {
		return err
	}
	return e.waitHubReachesGateway(ctx)
}
