// Package app is the gateway's command: it parses flags (package options)
// and runs the server that pkg/apiserver assembles.
package app

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	"k8s.io/component-base/term"
	"k8s.io/klog/v2"

	"github.com/clustergateway/cluster-gateway/cmd/apiserver/app/options"
	"github.com/clustergateway/cluster-gateway/pkg/logredact"
	"github.com/clustergateway/cluster-gateway/pkg/version"
)

// NewCommand is the gateway's root command; it runs until ctx is done.
func NewCommand(ctx context.Context) *cobra.Command {
	o := options.NewOptions()
	cmd := &cobra.Command{
		Use:   "cluster-gateway",
		Short: "Cluster Gateway: an aggregated API server that proxies to managed clusters",
		Long: `Cluster Gateway serves gateway.clustergateway.io/v1alpha1 ClusterGateways, stored as Secrets in
one hub namespace, and their proxy subresource, which forwards any request to that managed cluster.`,
		Version:      version.String(),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Feature gates and the effective version are final now: set
			// them before anything reads them.
			if err := o.ServerRun.ComponentGlobalsRegistry.Set(); err != nil {
				return err
			}
			// Log output passes through a redactor: no token, key or client
			// credential reaches a log at any verbosity (pkg/logredact).
			if err := logsapi.ValidateAndApplyWithOptions(o.Logs, &logsapi.LoggingOptions{
				ErrorStream: logredact.NewWriter(os.Stderr),
				InfoStream:  logredact.NewWriter(os.Stdout),
			}, nil); err != nil {
				return err
			}
			if err := o.Complete(); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			cfg, err := o.ServerConfig()
			if err != nil {
				return err
			}
			completed, err := cfg.Complete()
			if err != nil {
				return err
			}
			s, err := completed.New()
			if err != nil {
				return err
			}
			klog.InfoS("Starting cluster-gateway", "version", version.String())
			return s.Run(ctx)
		},
	}
	cmd.SetVersionTemplate(fmt.Sprintf("cluster-gateway %s\n", version.Get()))
	fs := cmd.Flags()
	fss := o.Flags()
	for _, f := range fss.FlagSets {
		fs.AddFlagSet(f)
	}
	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	cliflag.SetUsageAndHelpFunc(cmd, fss, cols)
	return cmd
}
