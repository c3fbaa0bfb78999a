// Command multicluster lists the pods of several managed clusters through the
// hub and the cluster-gateway, with one client and the hub's credentials: the
// cluster of each request is chosen by its context.
//
//	go run ./examples/multicluster --kubeconfig hub.kubeconfig cluster-1 cluster-2
//
// prints one line per pod: CLUSTER NAMESPACE NAME PHASE.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/clustergateway/cluster-gateway/pkg/multicluster"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the hub's kubeconfig (default: $KUBECONFIG, then ~/.kube/config)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: %s [--kubeconfig FILE] CLUSTER...\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*kubeconfig, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(kubeconfig string, clusters []string) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	hub, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return err
	}
	// One client, one connection pool to the hub, for every cluster.
	cs, err := kubernetes.NewForConfig(multicluster.ContextConfig(hub))
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CLUSTER\tNAMESPACE\tNAME\tPHASE")
	for _, cluster := range clusters {
		ctx := multicluster.WithCluster(context.Background(), cluster)
		pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("cluster %s: %w", cluster, err)
		}
		for _, p := range pods.Items {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", cluster, p.Namespace, p.Name, p.Status.Phase)
		}
	}
	return w.Flush()
}
