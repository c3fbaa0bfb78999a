// Package app is the kubectl-cgw command line.
package app

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"

	"github.com/clustergateway/cluster-gateway/pkg/generated/clientset/versioned"
	"github.com/clustergateway/cluster-gateway/pkg/version"
)

// hub is how every command reaches the hub: kubectl's own kubeconfig flags.
type hub struct {
	flags   *genericclioptions.ConfigFlags
	streams genericiooptions.IOStreams
}

func (h *hub) restConfig() (*rest.Config, error) {
	cfg, err := h.flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("the hub's kubeconfig: %w (choose it with --kubeconfig and --context)", err)
	}
	cfg.UserAgent = "kubectl-cgw/" + version.String()
	return cfg, nil
}

func (h *hub) client() (versioned.Interface, *rest.Config, error) {
	cfg, err := h.restConfig()
	if err != nil {
		return nil, nil, err
	}
	c, err := versioned.NewForConfig(cfg)
	return c, cfg, err
}

// NewCommand is the root command: kubectl-cgw, or `kubectl cgw` as a plugin.
// Errors are returned, not printed: the caller prints them once.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	return newRootCommand(newHub(streams))
}

func newHub(streams genericiooptions.IOStreams) *hub {
	h := &hub{flags: genericclioptions.NewConfigFlags(false), streams: streams}
	// ClusterGateways are cluster-scoped and nothing here uses discovery.
	h.flags.Namespace, h.flags.CacheDir = nil, nil
	return h
}

func newRootCommand(h *hub) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kubectl-cgw",
		Short: "Register clusters with a Cluster Gateway hub and reach them through it",
		Long: `kubectl cgw registers managed clusters with a Cluster Gateway hub (join), lists them (list),
and writes kubeconfigs that reach them through the hub with your own hub credentials (kubeconfig).

The hub is chosen with the usual kubeconfig flags (--kubeconfig, --context, ...). The cluster
being joined is chosen with join's --cluster-kubeconfig and --cluster-context.
The binary is kubectl-cgw; on PATH, kubectl runs it as "kubectl cgw".`,
		Example: `  # Register a cluster from its kubeconfig, then use it through the hub
  kubectl cgw join prod-eu --cluster-kubeconfig prod-eu.kubeconfig
  kubectl cgw kubeconfig prod-eu -o prod-eu-via-hub.kubeconfig
  kubectl --kubeconfig prod-eu-via-hub.kubeconfig get pods -A`,
		Version:       version.String(),
		SilenceUsage:  true,
		SilenceErrors: true,
		// Help shows "kubectl cgw join ..." as kubectl plugin users type it.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl cgw"},
	}
	cmd.SetVersionTemplate(versionLine() + "\n")
	cmd.SetIn(h.streams.In)
	cmd.SetOut(h.streams.Out)
	cmd.SetErr(h.streams.ErrOut)
	h.flags.AddFlags(cmd.PersistentFlags())
	cmd.AddCommand(newJoinCommand(h), newKubeconfigCommand(h), newListCommand(h), newCredentialCommand())
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w\nSee '%s --help'.", err, c.CommandPath())
	})
	return cmd
}

// versionLine is what --version prints.
func versionLine() string {
	v := version.Get()
	s := "kubectl-cgw " + v.GitVersion
	if v.GitCommit != "" {
		s += " (commit " + v.GitCommit
		if v.GitTreeState == "dirty" {
			s += ", dirty"
		}
		s += ")"
	}
	return s + " " + v.GoVersion + " " + v.Platform
}
