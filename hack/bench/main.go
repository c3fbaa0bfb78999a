// Command bench measures the proxied request path: the in-process Go
// benchmarks of pkg/proxy, then a side-by-side load against the real local
// environment (hack/localenv), then the gateway's memory per pooled cluster.
// It writes docs/performance.md and prints it. `make bench` runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
)

type options struct {
	StateDir, BinDir, Out, Go string
	Concurrency, Rounds       int
	Duration, Warm            time.Duration
	Gateways                  int
	BenchCount                int
	BenchTime                 string
	SkipGoBench, SkipEnv      bool
	GatewayProfile            string
	Only                      string // one section alone: "loads", "ab", "isolation", "streams", "watches" or "scan"
	Isolation                 isolationOptions
	GatewayBin                string // default: BinDir/cluster-gateway
	ScanGateways              int    // scan.go; 0 skips the scan
}

// requestPath is the object every load GETs (a Kubernetes GET of one object).
const requestPath = "/api/v1/namespaces/default"

func logf(format string, args ...any) { log.Printf(format, args...) }

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-"+noisyChildFlag {
		if err := noisyChildMain(os.Args[2:]); err != nil {
			log.Fatalf("noisy neighbour: %v", err)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "-"+bareChildFlag {
		if err := bareChildMain(os.Args[2:]); err != nil {
			log.Fatalf("bare proxy: %v", err)
		}
		return
	}
	var o options
	flag.StringVar(&o.StateDir, "state-dir", "_output/bench", "fresh state directory for the local environment (removed first)")
	flag.StringVar(&o.BinDir, "bin", "_output/bin", "kube-apiserver, kubectl, etcd, proxy-server, proxy-agent and cluster-gateway")
	flag.StringVar(&o.Out, "out", "docs/performance.md", "report to write")
	flag.StringVar(&o.Go, "go", "go", "go command for the in-process benchmarks")
	flag.IntVar(&o.Concurrency, "concurrency", 8, "keep-alive workers per load")
	flag.DurationVar(&o.Duration, "duration", 10*time.Second, "load time per path, split over -rounds")
	flag.IntVar(&o.Rounds, "rounds", 2, "interleaved rounds: each path runs duration/rounds per round")
	flag.DurationVar(&o.Warm, "warm", time.Second, "warm-up per path before measuring (connections, pool entries)")
	flag.IntVar(&o.Gateways, "gateways", 1000, "ClusterGateways for the memory-per-pooled-cluster step (0 skips it)")
	flag.IntVar(&o.BenchCount, "bench-count", 5, "rounds of the Go benchmarks, each benchmark once per round (medians are reported)")
	flag.StringVar(&o.BenchTime, "bench-time", "1s", "-benchtime of the Go benchmarks")
	flag.BoolVar(&o.SkipGoBench, "skip-go-bench", false, "skip the in-process Go benchmarks")
	flag.BoolVar(&o.SkipEnv, "skip-env", false, "skip the local environment (loads and memory)")
	flag.StringVar(&o.GatewayProfile, "gateway-profile", "gateway-cpu.pprof", "CPU profile of the gateway during the first gateway-port round, in the state dir; the hub and Konnectivity rounds' go to <name>-hub.pprof and <name>-konn.pprof (empty: none)")
	flag.StringVar(&o.Only, "only", "", `run one section alone ("loads", "ab", "isolation", "streams", "watches" or "scan"); its report goes into the state dir, not -out`)
	flag.StringVar(&o.GatewayBin, "gateway-bin", "", "the gateway binary (default: cluster-gateway in -bin), e.g. one built from this checkout")
	flag.IntVar(&o.ScanGateways, "scan-gateways", 10000, "scan: ClusterGateways with the default pool (0 skips the scan)")
	flag.DurationVar(&o.Isolation.Delay, "isolation-delay", time.Second, "isolation: delay the slow cluster's forward proxy adds to everything the cluster sends")
	flag.IntVar(&o.Isolation.Noisy, "isolation-noisy", 200, "isolation: workers saturating the slow cluster")
	flag.IntVar(&o.Isolation.NoisyUsers, "isolation-noisy-users", 8, "isolation: hub users the noisy workers are spread over")
	flag.IntVar(&o.Isolation.Rate, "isolation-rate", 50, "isolation: steady requests per second to the other cluster (and as many direct to it, the control)")
	flag.DurationVar(&o.Isolation.Phase, "isolation-phase", 4*time.Second, "isolation: steady load per phase (alone, with the neighbour) and round")
	flag.DurationVar(&o.Isolation.Warm, "isolation-warm", 2*time.Second, "isolation: noisy load before the steady load is measured")
	flag.IntVar(&o.Isolation.Rounds, "isolation-rounds", 10, "isolation: interleaved rounds of both phases, per gateway configuration")
	flag.IntVar(&o.Isolation.InFlight, "isolation-inflight", 150, "isolation: the gateway's --max-requests-inflight, small enough for the noisy workers to exhaust")
	flag.Parse()
	if o.Only != "" {
		onlySection(&o)
	}
	log.SetFlags(log.Ltime)

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, o); err != nil {
		log.Printf("bench failed: %v", err)
		cancel()
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	rep := &report{Machine: describeMachine(o.Go), Opts: o}
	began := time.Now()
	if !o.SkipGoBench {
		gb, err := runGoBench(ctx, o.Go, o.BenchCount, o.BenchTime)
		if err != nil {
			return err
		}
		rep.GoBench = gb
		fmt.Println("\n" + gb.markdown())
	}
	if !o.SkipEnv {
		if err := runEnv(ctx, o, rep); err != nil {
			return err
		}
	}
	rep.Total = time.Since(began)
	md := rep.markdown()
	if err := os.MkdirAll(filepath.Dir(o.Out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(o.Out, []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Println(md)
	logf("wrote %s (%s in all)", o.Out, rep.Total.Round(time.Second))
	return nil
}

// runEnv brings up a fresh local environment, runs the loads and the memory
// step, and stops every process it started whatever happens.
func runEnv(ctx context.Context, o options, rep *report) (err error) {
	if err := os.RemoveAll(o.StateDir); err != nil {
		return err
	}
	// Room for every bench gateway plus localenv's own: none may be evicted.
	capacity := o.Gateways + 100
	gatewayArgs := []string{"--pool-capacity=" + strconv.Itoa(capacity)}
	// The isolation section restarts the gateway with gatewayArgs and its
	// own limits; the loads' gateway also has room for -workers-many.
	env, err := localenv.Start(ctx, localenv.Options{
		StateDir:    o.StateDir,
		BinDir:      o.BinDir,
		GatewayBin:  o.GatewayBin,
		GatewayArgs: append(slices.Clone(gatewayArgs), workersGatewayArgs(o.Concurrency)...),
		// One proxy-server: the Konnectivity rows measure the path through
		// one, as the history in docs/performance.md did.
		KonnectivityServers: 1,
		Logf:                func(f string, a ...any) { logf("localenv: "+f, a...) },
	})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, env.Stop()) }()
	rep.EnvStartup = env.StartupTime
	rep.Capacity = capacity

	gw, err := newGatewayAdmin(env)
	if err != nil {
		return err
	}
	if o.Only == "" || o.Only == "loads" {
		if err := runLoadsAndPooled(ctx, o, env, gw, rep); err != nil {
			return err
		}
	}
	if o.Only == "" || o.Only == "ab" {
		logf("A/B: one gateway per piece switched off")
		if rep.AB, err = runAB(ctx, o, env, gatewayArgs); err != nil {
			return err
		}
	}
	if o.Only == "" || o.Only == "isolation" {
		logf("isolation: a slow cluster saturated next to a steady one")
		if rep.Isolation, err = runIsolation(ctx, env, gw, o.Isolation, gatewayArgs); err != nil {
			return err
		}
	}
	if o.Only == "" || o.Only == "streams" {
		logf("streams: port-forward, exec and logs -f over every path")
		if rep.Streams, err = runStreams(ctx, o, env, gw); err != nil {
			return err
		}
	}
	if (o.Only == "" || o.Only == "watches") && *watchCount > 0 {
		logf("watches: %d idle watches through the gateway, then through bare proxies", *watchCount)
		if rep.Watches, err = runWatches(ctx, o, env, gw); err != nil {
			return err
		}
	}
	if o.Only == "" || o.Only == "scan" {
		// Last: it restarts the gateway with the default pool.
		return runScanStep(ctx, o, env, gw, rep)
	}
	return nil
}

// runLoadsAndPooled runs sections 2 and 3: the loads side by side, then
// memory per pooled cluster.
func runLoadsAndPooled(ctx context.Context, o options, env *localenv.Env, gw *gatewayAdmin, rep *report) error {
	targets, closeTargets, err := buildTargets(ctx, env)
	if err != nil {
		return err
	}
	defer closeTargets()
	if targets, err = extendTargets(ctx, env, targets); err != nil {
		return err
	}
	rep.Targets = targets
	rep.GatewayArgs = env.Gateway.Args
	profile := ""
	if o.GatewayProfile != "" {
		profile = filepath.Join(o.StateDir, o.GatewayProfile)
	}
	if err := runLoads(ctx, gw, targets, o.Concurrency, o.Rounds, o.Duration, o.Warm, profile); err != nil {
		return err
	}
	if rep.AuthzIdle, err = measureAuthzSteady(ctx, gw, targets, o.Concurrency, o.Warm); err != nil {
		return err
	}
	rep.Profiles = readProfiles(ctx, o.Go, profile, targets)
	if o.Gateways > 0 {
		logf("memory per pooled cluster: %d ClusterGateways", o.Gateways)
		if rep.Pooled, err = measurePooled(ctx, env, gw, o.Gateways, o.Concurrency, o.StateDir); err != nil {
			return err
		}
	}
	return nil
}

// envPids are the processes of env whose CPU the loads read, by role: the
// gateway, the hub, managed-1, and the konnectivity cluster, proxy-server
// and agent.
func envPids(env *localenv.Env) map[string]int {
	pids := map[string]int{
		"gateway":   env.Gateway.Process.Pid(),
		"hub":       env.Hub.Process.Pid(),
		"managed-1": env.Managed[0].Process.Pid(),
	}
	if k := env.Konnectivity; k != nil {
		pids[k.Cluster.Name] = k.Cluster.Process.Pid()
		pids["proxy-server"] = k.Servers[0].Process.Pid()
		pids["proxy-agent"] = k.Agent.Pid()
	}
	return pids
}

// proxyPrefix is the path of c's ClusterGateway's proxy subresource, on the
// hub or on the gateway's own port.
func proxyPrefix(c *localenv.Cluster) string {
	return "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/" + c.GatewayName + "/proxy"
}

// buildTargets are the paths to the same object, side by side.
func buildTargets(ctx context.Context, env *localenv.Env) ([]*target, func(), error) {
	m1, k := env.Managed[0], env.Konnectivity
	pids := envPids(env)
	direct, err := mtlsClient(m1.CA.CertPEM, m1.GatewayUser)
	if err != nil {
		return nil, nil, err
	}
	var bares []*bareProxy // stopped by the closer, or here on an error
	stopBares := func() {
		for _, b := range bares {
			if err := b.stop(); err != nil {
				logf("%v", err)
			}
		}
	}
	bare, err := startBareProxy(ctx, m1, nil, false)
	if err != nil {
		return nil, nil, err
	}
	bares = append(bares, bare)
	pids["bare-proxy"] = bare.Pid()
	bareClient, err := mtlsClient(bare.CAPEM, nil)
	if err != nil {
		stopBares()
		return nil, nil, err
	}
	gwClient, err := mtlsClient(env.Gateway.CA.CertPEM, env.Hub.Admin)
	if err != nil {
		stopBares()
		return nil, nil, err
	}
	hubClient, err := mtlsClient(env.Hub.CA.CertPEM, env.Hub.Admin)
	if err != nil {
		stopBares()
		return nil, nil, err
	}
	proxyPath := func(c *localenv.Cluster) string { return proxyPrefix(c) + requestPath }
	bh, err := startBareProxy(ctx, m1, nil, true)
	if err != nil {
		stopBares()
		return nil, nil, err
	}
	bares = append(bares, bh)
	if err := registerBareBehindHub(ctx, env, bh.URL, bh.CAPEM); err != nil {
		stopBares()
		return nil, nil, err
	}
	// In its row, "bare-proxy" is the bare proxy that serves it.
	bhPids := maps.Clone(pids)
	bhPids["bare-proxy"] = bh.Pid()
	ts := []*target{
		{Key: "direct", Name: "direct → managed-1", Via: "client → kube-apiserver", URL: m1.URL + requestPath, Client: direct, Upstream: "managed-1"},
		{Key: "bare", Name: "bare reverse proxy → managed-1", Via: "client → httputil.ReverseProxy in a process of its own (one shared transport) → kube-apiserver", URL: bare.URL + requestPath, Client: bareClient, Upstream: "managed-1"},
		{Key: "gateway", Name: "gateway port → cluster-1 (Direct)", Via: "client → gateway :port (x509 authn, generic filters) → pooled transport → kube-apiserver", URL: env.Gateway.URL + proxyPath(m1), Client: gwClient, Upstream: "managed-1"},
		{Key: "hub", Name: "hub → gateway → cluster-1", Via: "client → hub kube-apiserver (aggregation) → gateway → kube-apiserver", URL: env.Hub.URL + proxyPath(m1), Client: hubClient, Upstream: "managed-1"},
		{Key: "hub-bare", Name: "hub → bare reverse proxy → managed-1", Via: "client → hub kube-apiserver (aggregation, an APIService of its own) → httputil.ReverseProxy in a process of its own → kube-apiserver (baseline of the hub goal)", URL: env.Hub.URL + bareProxyPrefix + m1.GatewayName + "/proxy" + requestPath, Client: hubClient, Upstream: "managed-1", Pids: bhPids},
	}
	if k != nil {
		d3, err := mtlsClient(k.Cluster.CA.CertPEM, k.Cluster.GatewayUser)
		if err != nil {
			stopBares()
			return nil, nil, err
		}
		bk, err := startBareProxy(ctx, k.Cluster, k, false)
		if err != nil {
			stopBares()
			return nil, nil, err
		}
		bares = append(bares, bk)
		bkClient, err := mtlsClient(bk.CAPEM, nil)
		if err != nil {
			stopBares()
			return nil, nil, err
		}
		// In its row, "bare-proxy" is the bare proxy that serves it.
		bkPids := maps.Clone(pids)
		bkPids["bare-proxy"] = bk.Pid()
		ts = append(ts,
			&target{Key: "konn", Name: "gateway port → " + k.Cluster.GatewayName + " (Konnectivity)", Via: "client → gateway :port → gRPC tunnel → proxy-server → proxy-agent → kube-apiserver", URL: env.Gateway.URL + proxyPath(k.Cluster), Client: gwClient, Upstream: k.Cluster.Name},
			&target{Key: "direct3", Name: "direct → " + k.Cluster.Name, Via: "client → kube-apiserver (baseline of the Konnectivity row)", URL: k.Cluster.URL + requestPath, Client: d3, Upstream: k.Cluster.Name},
			&target{Key: "bare-konn", Name: "bare reverse proxy → " + k.Cluster.Name + " (Konnectivity)", Via: "client → httputil.ReverseProxy in a process of its own → konnectivity-client's gRPC tunnel → proxy-server → proxy-agent → kube-apiserver (baseline of the Konnectivity goal)", URL: bk.URL + requestPath, Client: bkClient, Upstream: k.Cluster.Name, Pids: bkPids},
		)
	} else {
		ts = append(ts, &target{Key: "konn", Name: "gateway port → Konnectivity cluster", TODO: "TODO: this localenv runs no konnectivity proxy-server/agent (Env.Konnectivity is nil); the row is not measured"})
	}
	for _, t := range ts {
		if t.Pids == nil {
			t.Pids = pids
		}
	}
	return ts, func() {
		stopBares()
		for _, t := range ts {
			if t.Client != nil {
				t.Client.CloseIdleConnections()
			}
		}
	}, nil
}
