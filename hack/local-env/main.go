// Command local-env brings up the local environment of hack/localenv (etcd, a
// hub and managed kube-apiservers, fake kubelets, the gateway), prints what to
// try, and keeps it running until SIGINT or SIGTERM. Used by `make demo` and
// `make local-up`.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
)

func main() {
	stateDir := flag.String("state-dir", "_output/local", "directory for PKI, etcd data, logs and kubeconfigs")
	binDir := flag.String("bin", "_output/bin", "directory with kube-apiserver, kubectl, etcd and cluster-gateway")
	managed := flag.Int("managed", 2, "number of managed clusters")
	timeout := flag.Duration("request-timeout", 0, "the hub's and gateway's --request-timeout (0: 60s default)")
	skipGateway := flag.Bool("skip-gateway", false, "do not run the gateway (e.g. before it is built)")
	noKonnectivity := flag.Bool("no-konnectivity", false, "run no proxy-server, proxy-agent or cluster behind them")
	flag.Parse()
	log.SetFlags(log.Ltime)

	// Stop on the first signal; Start itself is aborted by it too.
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	ready := filepath.Join(*stateDir, "ready")
	_ = os.Remove(ready)
	env, err := localenv.Start(ctx, localenv.Options{
		StateDir:          *stateDir,
		BinDir:            *binDir,
		ManagedClusters:   *managed,
		HubRequestTimeout: *timeout,
		SkipGateway:       *skipGateway,
		NoKonnectivity:    *noKonnectivity,
		Logf:              log.Printf,
	})
	if err != nil {
		log.Fatalf("local environment failed to start: %v", err)
	}
	printHowTo(env)
	// The marker `make local-up` waits for.
	if err := os.WriteFile(ready, []byte(time.Now().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		log.Printf("cannot write %s: %v", ready, err)
	}

	<-ctx.Done()
	log.Printf("stopping")
	_ = os.Remove(ready)
	if err := env.Stop(); err != nil {
		log.Fatalf("stop: %v", err)
	}
	log.Printf("stopped")
}

func printHowTo(e *localenv.Env) {
	rel := func(p string) string {
		if wd, err := os.Getwd(); err == nil {
			if r, err := filepath.Rel(wd, p); err == nil && !strings.HasPrefix(r, "..") {
				return r
			}
		}
		return p
	}
	kc := rel(e.KubectlPath()) + " --kubeconfig "
	hub := kc + rel(e.Hub.Kubeconfig)
	fmt.Printf("\nLocal environment is up (state in %s, logs in %s).\n", rel(e.StateDir), rel(filepath.Join(e.StateDir, "logs")))
	fmt.Printf("  hub        %s\n", e.Hub.URL)
	for _, c := range e.Managed {
		fmt.Printf("  %-10s %s (ClusterGateway %s)\n", c.Name, c.URL, c.GatewayName)
	}
	if k := e.Konnectivity; k != nil {
		fmt.Printf("  %-10s %s (ClusterGateway %s, endpoint type Konnectivity)\n", k.Cluster.Name, k.Cluster.URL, k.Cluster.GatewayName)
		for _, p := range k.Servers {
			fmt.Printf("  konnectivity %s %s (pid %d, metrics %s)\n", p.ID, p.Address(), p.Process.Pid(), p.MetricsURL)
		}
		fmt.Printf("  proxy-agent pid %d (metrics %s)", k.Agent.Pid(), k.AgentMetricsURL)
		if k.AgentBalancer != nil {
			fmt.Printf(", connected to every proxy-server through %s", k.AgentBalancer.Addr)
		}
		fmt.Println()
	}
	if e.Gateway.Process != nil {
		fmt.Printf("  gateway    %s (pid %d)\n", e.Gateway.URL, e.Gateway.Process.Pid())
	} else {
		fmt.Printf("  gateway    not running (-skip-gateway)\n")
	}
	fmt.Printf("  forward proxies for spec.endpoint.proxyURL: %s, %s (loopback destinations only)\n", e.HTTPProxy.URL, e.SOCKS5Proxy.URL)
	c := e.Managed[0]
	via := kc + rel(c.ViaHubKubeconfig)
	fmt.Printf("\nTry:\n")
	fmt.Printf("  %s get clustergateways\n", hub)
	fmt.Printf("  %s get --raw /apis/gateway.clustergateway.io/v1alpha1/clustergateways/%s/proxy/version\n", hub, c.GatewayName)
	fmt.Printf("  %s get ns\n", via)
	fmt.Printf("  %s exec %s -- hostname\n", via, localenv.DemoPod)
	fmt.Printf("  echo hello | %s exec -i %s -- cat\n", via, localenv.DemoPod)
	fmt.Printf("  %s port-forward pod/%s 8080:80   # then: nc 127.0.0.1 8080 (echoes)\n", via, localenv.DemoPod)
	fmt.Printf("  %s logs -f %s\n", via, localenv.DemoPod)
	fmt.Printf("  %s get clustergateways   # bob may list; alice may not\n", kc+rel(e.Bob.Kubeconfig))
	fmt.Printf("  %s get pods              # %s directly, without the gateway\n", kc+rel(c.Kubeconfig), c.Name)
	if k := e.Konnectivity; k != nil {
		kv := kc + rel(k.Cluster.ViaHubKubeconfig)
		fmt.Printf("  %s exec %s -- hostname   # %s, through the konnectivity tunnel\n", kv, localenv.DemoPod, k.Cluster.Name)
		fmt.Printf("  %s get pods -w\n", kv)
		fmt.Printf("  curl -s %s | grep -E '^konnectivity_network_proxy_agent_(dial_duration_seconds_count|open_endpoint_connections)'   # the agent's dials\n", k.AgentMetricsURL)
		if len(k.Servers) > 1 {
			fmt.Printf("  kill -STOP %d; %s get ns; kill -CONT %d   # one proxy-server frozen: requests go through the other\n", k.Servers[0].Process.Pid(), kv, k.Servers[0].Process.Pid())
		}
	}
	fmt.Printf("\nCtrl-C (or `make local-down` when started by `make local-up`) stops everything.\n")
}
