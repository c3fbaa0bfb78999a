// Command cluster-gateway is the Cluster Gateway aggregated API server.
package main

import (
	"os"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"

	"github.com/clustergateway/cluster-gateway/cmd/apiserver/app"
	"github.com/clustergateway/cluster-gateway/pkg/credentials"
)

func main() {
	// Credential providers run through this binary (a launcher that cleans
	// their environment and bounds their run): that is this process then.
	credentials.RunLauncherIfAsked()
	ctx := genericapiserver.SetupSignalContext()
	os.Exit(cli.Run(app.NewCommand(ctx)))
}
