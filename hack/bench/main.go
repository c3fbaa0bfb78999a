// Command bench measures the proxied request path: the in-process Go
// benchmarks of pkg/proxy, then side-by-side loads, A/B variants,
// isolation, memory, streams and idle watches against the real local
// environment (hack/localenv). It writes docs/performance.md and prints
// it. `make bench` runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
	Only                      string // one section alone (sections)
	Isolation                 isolationOptions
	GatewayBin                string // default: BinDir/cluster-gateway
	ScanGateways              int    // scan.go; 0 skips the scan
}

// requestPath is the object every load GETs (a Kubernetes GET of one object).
const requestPath = "/api/v1/namespaces/default"

func logf(format string, args ...any) { log.Printf(format, args...) }

// childMains are the other programs of the bench binary, each a process
// of its own: the bare reverse proxy and the isolation section's noisy
// neighbour.
var childMains = map[string]func([]string) error{bareChildFlag: bareChildMain, noisyChildFlag: noisyChildMain}

func main() {
	if len(os.Args) > 1 {
		if childMain := childMains[strings.TrimPrefix(os.Args[1], "-")]; childMain != nil {
			if err := childMain(os.Args[2:]); err != nil {
				log.Fatalf("%s: %v", os.Args[1], err)
			}
			return
		}
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
	flag.StringVar(&o.Only, "only", "", `run one section alone ("loads", "ab", "isolation", "streams", "watches", "fanout" or "scan"); its report goes into the state dir, not -out`)
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
		if _, ok := sections[o.Only]; !ok {
			log.Fatalf("-only %q: the sections that run alone are %q", o.Only, sectionOrder)
		}
		// A partial report never replaces the whole one (make bench passes
		// -out docs/performance.md).
		o.SkipGoBench, o.Out = true, filepath.Join(o.StateDir, "performance-"+o.Only+".md")
		if o.Only == "loads" {
			o.Gateways = 0 // section 2 alone, without memory per pooled cluster
		}
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
		tables, err := render("goBenchTables", gb)
		if err != nil {
			return err
		}
		fmt.Printf("\n%s", tables)
	}
	if !o.SkipEnv {
		if err := runEnv(ctx, o, rep); err != nil {
			return err
		}
	}
	rep.Total = time.Since(began)
	md, err := rep.markdown()
	if err != nil {
		return err
	}
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

// section runs one section of the report in the environment.
type section func(ctx context.Context, s *session) error

// session is what every section runs in: the flags, the environment, the
// gateway's admin client and the report it fills.
type session struct {
	o   options
	env *localenv.Env
	gw  *gatewayAdmin
	rep *report
	// gatewayArgs are the flags every gateway of the run starts with; the
	// sections that restart it add their own.
	gatewayArgs []string
}

// sections run in this order; the scan is last, as it restarts the gateway
// with the default pool.
var (
	sectionOrder = []string{"loads", "ab", "isolation", "streams", "watches", "fanout", "scan"}
	sections     = map[string]section{
		"loads": runLoadsAndPooled, "ab": runAB, "isolation": runIsolation,
		"streams": runStreams, "watches": runWatches, "fanout": runFanout, "scan": runScan,
	}
)

// runEnv brings up a fresh local environment, runs the sections, and stops
// every process it started whatever happens.
func runEnv(ctx context.Context, o options, rep *report) (err error) {
	if err := os.RemoveAll(o.StateDir); err != nil {
		return err
	}
	// Room for every bench gateway plus localenv's own: none may be evicted.
	rep.Capacity = o.Gateways + 100
	s := &session{o: o, rep: rep, gatewayArgs: []string{"--pool-capacity=" + strconv.Itoa(rep.Capacity)}}
	s.env, err = localenv.Start(ctx, localenv.Options{
		StateDir:   o.StateDir,
		BinDir:     o.BinDir,
		GatewayBin: o.GatewayBin,
		// The loads' gateway also has room for -workers-many.
		GatewayArgs: append(slices.Clone(s.gatewayArgs), workersGatewayArgs(o.Concurrency)...),
		// One proxy-server: the Konnectivity rows measure the path through
		// one, as the history in docs/performance.md did.
		KonnectivityServers: 1,
		Logf:                func(f string, a ...any) { logf("localenv: "+f, a...) },
	})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.env.Stop()) }()
	rep.EnvStartup = s.env.StartupTime
	if s.gw, err = newGatewayAdmin(s.env); err != nil {
		return err
	}
	for _, name := range sectionOrder {
		if o.Only == "" || o.Only == name {
			if err := sections[name](ctx, s); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	return nil
}

// runLoadsAndPooled runs sections 2 and 3: the loads side by side, then
// memory per pooled cluster.
func runLoadsAndPooled(ctx context.Context, s *session) error {
	o, rep := s.o, s.rep
	targets, closeTargets, err := buildTargets(ctx, s.env)
	if err != nil {
		return err
	}
	defer closeTargets()
	rep.Targets, rep.GatewayArgs = targets, s.env.Gateway.Args
	profile := ""
	if o.GatewayProfile != "" {
		profile = filepath.Join(o.StateDir, o.GatewayProfile)
	}
	if err := runLoads(ctx, s.gw, targets, o.Concurrency, o.Rounds, o.Duration, o.Warm, profile); err != nil {
		return err
	}
	if rep.AuthzIdle, err = measureAuthzSteady(ctx, s.gw, targets, o.Concurrency, o.Warm); err != nil {
		return err
	}
	rep.Profiles = readProfiles(ctx, o.Go, profile, targets)
	if o.Gateways > 0 {
		logf("memory per pooled cluster: %d ClusterGateways", o.Gateways)
		rep.Pooled, err = measurePooled(ctx, s.env, s.gw, o.Gateways, o.Concurrency, o.StateDir)
	}
	return err
}
