// Command kubectl-cgw registers managed clusters with a Cluster Gateway hub
// and hands out kubeconfigs that reach them through it. On PATH it is also
// the kubectl plugin `kubectl cgw`.
package main

import (
	"fmt"
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/clustergateway/cluster-gateway/cmd/kubectl-cgw/app"
)

func main() {
	cmd := app.NewCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	if err := cmd.Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
}
