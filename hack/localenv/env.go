package localenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// Options configure Start. Only StateDir and BinDir are required.
type Options struct {
	StateDir        string // PKI, etcd data, logs and kubeconfigs; reset by Start
	BinDir          string // kube-apiserver, kubectl, etcd, cluster-gateway
	ConfigDir       string // the gateway's manifests; default: config/ above the working dir
	ManagedClusters int    // default 2

	// HubRequestTimeout is the hub's --request-timeout (0: kube-apiserver's 60s).
	HubRequestTimeout time.Duration
	// GatewayRequestTimeout is the gateway's --request-timeout (0: HubRequestTimeout).
	GatewayRequestTimeout time.Duration
	// GatewayBin is the gateway binary (default BinDir/cluster-gateway); the
	// end-to-end tests run one built with -race.
	GatewayBin string
	// GatewayArgs are appended to the gateway's standard flags.
	GatewayArgs []string
	// SkipGateway runs no gateway process (config/ is still applied);
	// it implies SkipGateways.
	SkipGateway bool
	// SkipGateways creates no ClusterGateway objects.
	SkipGateways bool
	// NoKonnectivity runs no proxy-server, agent or cluster behind them.
	NoKonnectivity bool
	// KonnectivityServers is how many proxy-servers run (default 2), with the
	// agent connected to each and the gateway holding a tunnel to each.
	KonnectivityServers int

	StartTimeout time.Duration // for the whole start, and for each gateway restart; default 3m
	Logf         func(format string, args ...any)
}

// Env is a running environment. Fields are read-only for callers.
type Env struct {
	Options
	Etcd         *Process
	EtcdURL      string
	Hub          *Cluster
	Managed      []*Cluster
	FrontProxyCA *CA
	Gateway      *Gateway
	Alice, Bob   *User
	Konnectivity *Konnectivity // nil with NoKonnectivity
	StartupTime  time.Duration // how long Start took

	// Forward proxies in this process for ClusterGateways with a proxyURL.
	HTTPProxy, SOCKS5Proxy *ForwardProxy
	delayingProxies        []*ForwardProxy // StartDelayingProxy's, under mu

	frontProxyClient *KeyPair
	spawn            *spawner
	mu               sync.Mutex
	procs            []*Process
	gatewayLogs      []string // under mu: see GatewayLogs
	stopOnce         sync.Once
	stopErr          error
}

// stopGrace is how long a process gets between SIGTERM and SIGKILL.
const stopGrace = 5 * time.Second

// Start brings the environment up. On error everything already started has
// been stopped again.
func Start(ctx context.Context, opts Options) (*Env, error) {
	e := &Env{Options: opts}
	if err := e.defaults(); err != nil {
		return nil, err
	}
	if err := e.resetState(); err != nil {
		return nil, err
	}
	e.spawn = newSpawner()
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, e.StartTimeout)
	defer cancel()
	if err := e.up(ctx); err != nil {
		if stopErr := e.Stop(); stopErr != nil {
			err = fmt.Errorf("%w (and stopping: %v)", err, stopErr)
		}
		return nil, err
	}
	e.StartupTime = time.Since(began)
	e.Logf("environment up in %s", e.StartupTime.Round(100*time.Millisecond))
	return e, nil
}

func (e *Env) defaults() error {
	if e.StateDir == "" || e.BinDir == "" {
		return errors.New("localenv: Options.StateDir and Options.BinDir are required")
	}
	var err error
	if e.StateDir, err = filepath.Abs(e.StateDir); err != nil {
		return err
	}
	if e.BinDir, err = filepath.Abs(e.BinDir); err != nil {
		return err
	}
	if e.ConfigDir == "" {
		if e.ConfigDir, err = findConfigDir(); err != nil {
			return err
		}
	}
	if e.ManagedClusters == 0 {
		e.ManagedClusters = 2
	}
	if e.ManagedClusters > 250 {
		return errors.New("localenv: at most 250 managed clusters (one loopback address each)")
	}
	if e.StartTimeout == 0 {
		e.StartTimeout = 3 * time.Minute
	}
	if e.KonnectivityServers == 0 {
		e.KonnectivityServers = 2
	}
	if e.SkipGateway {
		e.SkipGateways = true
	}
	if e.Logf == nil {
		e.Logf = func(string, ...any) {}
	}
	err = CheckBinaries(e.BinDir, !e.SkipGateway)
	if !e.NoKonnectivity {
		err = errors.Join(err, konnectivityBinaries(e.BinDir))
	}
	return err
}

// CheckBinaries says which binaries are missing and how to build them.
func CheckBinaries(binDir string, gateway bool) error {
	var errs []error
	for _, b := range []string{"etcd", "kube-apiserver", "kubectl"} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			errs = append(errs, fmt.Errorf("missing %s: run `make tools`", filepath.Join(binDir, b)))
		}
	}
	if gateway {
		if _, err := os.Stat(filepath.Join(binDir, "cluster-gateway")); err != nil {
			errs = append(errs, fmt.Errorf("missing %s: run `make build`", filepath.Join(binDir, "cluster-gateway")))
		}
	}
	return errors.Join(errs...)
}

// resetState removes what a previous run left, but only the paths Start
// writes, so a state dir shared with other files (pid, logs) is safe.
func (e *Env) resetState() error {
	if err := os.MkdirAll(e.StateDir, 0o755); err != nil {
		return err
	}
	old, _ := filepath.Glob(filepath.Join(e.StateDir, "*.kubeconfig"))
	for _, p := range append(old, "pki", "etcd", "logs", "manifests") {
		if !filepath.IsAbs(p) {
			p = filepath.Join(e.StateDir, p)
		}
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	for _, d := range []string{"pki", "logs", "manifests"} {
		if err := os.MkdirAll(filepath.Join(e.StateDir, d), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// start starts bin from BinDir, logging to <state>/logs/<name>.log, and
// records it so Stop stops it.
func (e *Env) start(name, bin string, args ...string) (*Process, error) {
	if !filepath.IsAbs(bin) {
		bin = filepath.Join(e.BinDir, bin)
	}
	p, err := e.spawn.start(name, filepath.Join(e.StateDir, "logs", name+".log"), bin, args...)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.procs = append(e.procs, p)
	e.mu.Unlock()
	return p, nil
}

func (e *Env) up(ctx context.Context) error {
	step := e.stepper()
	if err := e.newPKI(); err != nil {
		return fmt.Errorf("generate PKI: %w", err)
	}
	step("PKI generated in %s", filepath.Join(e.StateDir, "pki"))

	if err := e.startForwardProxies(); err != nil {
		return err
	}
	step("forward proxies at %s and %s", e.HTTPProxy.URL, e.SOCKS5Proxy.URL)

	if err := e.startEtcd(ctx); err != nil {
		return err
	}
	step("etcd ready at %s", e.EtcdURL)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return e.startAPIServer(gctx, e.Hub, e.hubArgs()) })
	for _, c := range e.Managed {
		g.Go(func() error { return e.startAPIServer(gctx, c, managedArgs(c)) })
	}
	if k := e.Konnectivity; k != nil {
		g.Go(func() error { return e.startAPIServer(gctx, k.Cluster, managedArgs(k.Cluster)) })
		g.Go(func() error { return e.startKonnectivity(gctx) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	step("kube-apiservers ready: hub %s, %s", e.Hub.URL, e.managedURLs())

	if err := e.writeAdminKubeconfigs(); err != nil {
		return err
	}
	g, gctx = errgroup.WithContext(ctx)
	g.Go(func() error {
		return retry(gctx, "apply config/ to the hub", func(context.Context) error { return e.installConfig() })
	})
	for _, c := range e.Managed {
		g.Go(func() error { return e.setupManaged(gctx, c) })
	}
	if k := e.Konnectivity; k != nil {
		g.Go(func() error { return e.setupManaged(gctx, k.Cluster) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	step("config/ applied to the hub; fake nodes and pods created")

	if err := e.writeGatewayKubeconfig(); err != nil {
		return err
	}
	if err := e.createUsers(); err != nil {
		return err
	}
	step("gateway token, users alice and bob created")

	if e.SkipGateway {
		e.Logf("gateway skipped (SkipGateway)")
		return nil
	}
	if err := e.StartGateway(ctx, nil); err != nil {
		return err
	}
	step("gateway ready at %s, APIService Available", e.Gateway.URL)
	if e.SkipGateways {
		return nil
	}
	if err := e.createClusterGateways(); err != nil {
		return err
	}
	step("ClusterGateways created")
	return nil
}

// stepper logs each step with the time since the previous one.
func (e *Env) stepper() func(format string, args ...any) {
	last := time.Now()
	return func(format string, args ...any) {
		now := time.Now()
		e.Logf("%s (%s)", fmt.Sprintf(format, args...), now.Sub(last).Round(10*time.Millisecond))
		last = now
	}
}

func (e *Env) managedURLs() string {
	s := ""
	for i, c := range e.Managed {
		if i > 0 {
			s += ", "
		}
		s += c.Name + " " + c.URL
	}
	if e.Konnectivity != nil {
		s += ", " + e.Konnectivity.summary()
	}
	return s
}

func (e *Env) newPKI() error {
	var err error
	if e.Hub, err = e.newCluster("hub", "127.0.0.1", false); err != nil {
		return err
	}
	for i := 1; i <= e.ManagedClusters; i++ {
		c, err := e.newCluster(fmt.Sprintf("managed-%d", i), fmt.Sprintf("127.0.0.%d", i+1), true)
		if err != nil {
			return err
		}
		c.GatewayName = fmt.Sprintf("cluster-%d", i)
		c.ViaHubKubeconfig = filepath.Join(e.StateDir, c.GatewayName+"-via-hub.kubeconfig")
		e.Managed = append(e.Managed, c)
	}
	dir := filepath.Join(e.StateDir, "pki", "front-proxy")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if e.FrontProxyCA, err = newCA(dir, "ca"); err != nil {
		return err
	}
	if e.frontProxyClient, err = e.FrontProxyCA.issue(dir, "client", certSpec{CommonName: "front-proxy-client", Client: true}); err != nil {
		return err
	}
	if !e.NoKonnectivity {
		if err := e.newKonnectivity(); err != nil {
			return err
		}
	}
	e.Gateway, err = e.newGateway()
	return err
}

// writeAdminKubeconfigs writes hub.kubeconfig, managed-N.kubeconfig and
// cluster-N-via-hub.kubeconfig (hub admin, server = the proxy URL).
func (e *Env) writeAdminKubeconfigs() error {
	if err := writeKubeconfig(e.Hub.Kubeconfig, "hub", e.Hub.URL, e.Hub.CA.CertPEM, e.Hub.Admin, ""); err != nil {
		return err
	}
	for _, c := range e.Managed {
		if err := writeKubeconfig(c.Kubeconfig, c.Name, c.URL, c.CA.CertPEM, c.Admin, ""); err != nil {
			return err
		}
		if err := writeKubeconfig(c.ViaHubKubeconfig, c.GatewayName, c.ProxyURL(e.Hub), e.Hub.CA.CertPEM, e.Hub.Admin, ""); err != nil {
			return err
		}
	}
	return e.writeKonnectivityKubeconfigs()
}

// Pids lists the running child processes by name.
func (e *Env) Pids() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	pids := map[string]int{}
	for _, p := range e.procs {
		if !p.Exited() {
			pids[p.Name] = p.Pid()
		}
	}
	return pids
}

// Stop stops everything Start started, newest first, each by its pid; it is
// safe after a partial start and when called twice.
func (e *Env) Stop() error {
	e.stopOnce.Do(func() {
		errs := []error{e.stopForwardProxies()}
		for _, c := range e.Managed {
			if c.Kubelet != nil {
				errs = append(errs, c.Kubelet.Close())
			}
		}
		if e.Konnectivity != nil {
			errs = append(errs, e.Konnectivity.stop())
		}
		e.mu.Lock()
		procs := append([]*Process(nil), e.procs...)
		e.mu.Unlock()
		// Clients (gateway, kube-apiservers) before etcd, so they exit cleanly.
		var wg sync.WaitGroup
		errCh := make(chan error, len(procs))
		for _, p := range procs {
			if p != e.Etcd {
				wg.Add(1)
				go func() { defer wg.Done(); errCh <- p.Stop(stopGrace) }()
			}
		}
		wg.Wait()
		if e.Etcd != nil {
			errCh <- e.Etcd.Stop(stopGrace)
		}
		close(errCh)
		for err := range errCh {
			errs = append(errs, err)
		}
		if e.spawn != nil {
			e.spawn.close()
		}
		e.stopErr = errors.Join(errs...)
	})
	return e.stopErr
}
