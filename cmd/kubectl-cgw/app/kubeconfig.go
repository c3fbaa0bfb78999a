package app

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/multicluster"
)

type kubeconfigOptions struct {
	names     []string
	all       bool
	output    string
	overwrite bool
	selector  string // -l: one context for the set the selector matches
	set       bool   // --set: one context for the named clusters as a set
}

func newKubeconfigCommand(h *hub) *cobra.Command {
	o := &kubeconfigOptions{}
	cmd := &cobra.Command{
		Use:   "kubeconfig (NAME... | --all | -l SELECTOR | --set NAME...) [-o FILE]",
		Short: "Write a kubeconfig that reaches clusters through the hub",
		Long: `Write a kubeconfig with one context per cluster, named after the cluster, whose server is
the hub's proxy URL for it:

  <hub server>/apis/gateway.clustergateway.io/v1alpha1/clustergateways/NAME/proxy

It authenticates with the hub context's own user, exactly as your hub kubeconfig does (client
certificate, token, exec plugin, ... by reference or by value as they are there): no new
credential is minted, and access is what the hub grants you (the ClusterRole
cluster-gateway:proxy, or cluster-gateway:proxy-reader for GET requests only).
kubectl, helm, k9s and client-go programs use it as any kubeconfig.
The first cluster's context is the current context.

With -l SELECTOR (a label selector on ClusterGateways) or --set NAME..., it writes one context
for the set of clusters instead, whose server reads them all as one (list and watch, read-only):

  <hub server>/apis/gateway.clustergateway.io/v1alpha1/clustersets/SET/proxy

where SET is labels:SELECTOR or names:NAME,... (docs/api.md). kubectl get shows a CLUSTER
column, -o json/yaml marks each item with the annotation gateway.clustergateway.io/cluster,
and a cluster that fails is a warning. The set holds only the clusters the hub lets you use.

It is printed on stdout, or written to FILE (mode 0600) with -o; an existing FILE is only
replaced with --overwrite. To merge it into another kubeconfig:
  KUBECONFIG=~/.kube/config:FILE kubectl config view --flatten > merged`,
		Example: `  # One cluster
  kubectl cgw kubeconfig prod-eu -o prod-eu.kubeconfig
  kubectl --kubeconfig prod-eu.kubeconfig get nodes

  # Every cluster on the hub, one context each
  kubectl cgw kubeconfig --all -o clusters.kubeconfig
  kubectl --kubeconfig clusters.kubeconfig --context prod-us get pods -A
  helm --kubeconfig clusters.kubeconfig --kube-context prod-us list -A

  # Every prod cluster, read as one
  kubectl cgw kubeconfig -l env=prod -o prod.kubeconfig
  kubectl --kubeconfig prod.kubeconfig get pods -A`,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.names = args
			return o.run(cmd.Context(), h)
		},
	}
	cmd.Flags().BoolVar(&o.all, "all", false, "Every ClusterGateway on the hub.")
	cmd.Flags().StringVarP(&o.output, "output-file", "o", "", "Write the kubeconfig to this file instead of stdout.")
	cmd.Flags().BoolVar(&o.overwrite, "overwrite", false, "Replace --output-file if it exists.")
	cmd.Flags().StringVarP(&o.selector, "selector", "l", "", "One context for the set of ClusterGateways this label selector matches, read as one (list and watch).")
	cmd.Flags().BoolVar(&o.set, "set", false, "One context for the named clusters as a set, read as one (list and watch).")
	return cmd
}

func (o *kubeconfigOptions) run(ctx context.Context, h *hub) error {
	switch {
	case o.selector != "" && (o.all || o.set || len(o.names) > 0):
		return errors.New("give -l SELECTOR alone: it chooses the set's clusters")
	case o.set && o.all:
		return errors.New("give --set with cluster names, or -l SELECTOR for a set by labels")
	case o.set && len(o.names) == 0:
		return errors.New("--set needs the names of its clusters (kubectl cgw list shows them)")
	case o.selector != "":
		if _, err := labels.Parse(o.selector); err != nil {
			return fmt.Errorf("-l %q is not a label selector: %w", o.selector, err)
		}
		return o.runSet(ctx, h, multicluster.LabelsSet(o.selector))
	case o.all && len(o.names) > 0:
		return errors.New("give cluster names or --all, not both")
	case !o.all && len(o.names) == 0:
		return errors.New("name the clusters (kubectl cgw list shows them), or pass --all")
	}
	if o.output != "" && !o.overwrite {
		if _, err := os.Lstat(o.output); err == nil { // a symlink too, dangling or not
			return fmt.Errorf("%s exists: pass --overwrite to replace it, or merge with KUBECONFIG=%s:NEW kubectl config view --flatten", o.output, o.output)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	gc, cfg, err := h.client()
	if err != nil {
		return err
	}
	gws := gc.GatewayV1alpha1().ClusterGateways()
	names := o.names
	if o.all {
		list, err := gws.List(ctx, metav1.ListOptions{})
		if err != nil {
			return hubError("list ClusterGateways", err)
		}
		if len(list.Items) == 0 {
			return errors.New("there are no ClusterGateways on the hub: register a cluster with `kubectl cgw join`")
		}
		for _, gw := range list.Items {
			names = append(names, gw.Name)
		}
	} else {
		for _, n := range names {
			if _, err := gws.Get(ctx, n, metav1.GetOptions{}); err != nil {
				if apierrors.IsNotFound(err) && !isResourceMissing(err) {
					return fmt.Errorf("there is no ClusterGateway %q on the hub (kubectl cgw list shows them)", n)
				}
				return hubError(fmt.Sprintf("get ClusterGateway %q", n), err)
			}
		}
	}
	if o.set {
		return o.runSet(ctx, h, multicluster.NamesSet(names))
	}
	userName, err := h.userName()
	if err != nil {
		return err
	}
	kc := proxyKubeconfig(cfg, h.proxyURL(), userName, names)
	if err := o.write(h, kc); err != nil {
		return err
	}
	o.warnWithoutProxyAccess(ctx, h, cfg, names)
	return nil
}

// runSet writes one context, named after the set, whose server reads it.
func (o *kubeconfigOptions) runSet(ctx context.Context, h *hub, set string) error {
	if o.output != "" && !o.overwrite {
		if _, err := os.Lstat(o.output); err == nil {
			return fmt.Errorf("%s exists: pass --overwrite to replace it", o.output)
		}
	}
	_, cfg, err := h.client()
	if err != nil {
		return err
	}
	userName, err := h.userName()
	if err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.AuthInfos[userName] = authInfoFrom(cfg)
	c := clusterFrom(cfg)
	c.Server = multicluster.SetConfigFor(cfg, set).Host
	c.ProxyURL = h.proxyURL()
	kc.Clusters[set] = c
	kc.Contexts[set] = &clientcmdapi.Context{Cluster: set, AuthInfo: userName}
	kc.CurrentContext = set
	return o.write(h, kc)
}

func (o *kubeconfigOptions) write(h *hub, kc *clientcmdapi.Config) error {
	if o.output == "" {
		b, err := clientcmd.Write(*kc)
		if err != nil {
			return err
		}
		_, err = h.streams.Out.Write(b)
		return err
	}
	b, err := clientcmd.Write(*kc)
	if err != nil {
		return err
	}
	if err := writeCredentialFile(o.output, b, o.overwrite); err != nil {
		return fmt.Errorf("write %s: %w", o.output, err)
	}
	fmt.Fprintf(h.streams.ErrOut, "wrote %s: contexts %v (current: %s)\n", o.output, sortedKeys(kc.Contexts), kc.CurrentContext)
	return nil
}

// warnWithoutProxyAccess tells the user when the hub will refuse the proxy,
// without failing: the kubeconfig may be meant for someone else's setup.
func (o *kubeconfigOptions) warnWithoutProxyAccess(ctx context.Context, h *hub, cfg *rest.Config, names []string) {
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return
	}
	for _, n := range names {
		r, err := kc.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: "get", Group: gatewayv1alpha1.SchemeGroupVersion.Group, Resource: "clustergateways", Subresource: "proxy", Name: n,
			}},
		}, metav1.CreateOptions{})
		if err == nil && !r.Status.Allowed {
			fmt.Fprintf(h.streams.ErrOut, "Warning: the hub does not let you use clustergateways/proxy for %q: requests through this kubeconfig will get 403 Forbidden "+
				"until a hub administrator grants it (the ClusterRole cluster-gateway:proxy, or cluster-gateway:proxy-reader for reads only)\n", n)
		}
	}
}

// proxyKubeconfig is one cluster and context per name, server = the hub's
// proxy URL for it, all sharing the hub's user entry unchanged.
func proxyKubeconfig(hubCfg *rest.Config, proxyURL, userName string, names []string) *clientcmdapi.Config {
	kc := clientcmdapi.NewConfig()
	user := authInfoFrom(hubCfg)
	kc.AuthInfos[userName] = user
	for _, n := range names {
		c := clusterFrom(hubCfg)
		c.Server = multicluster.ConfigFor(hubCfg, n).Host
		c.ProxyURL = proxyURL
		kc.Clusters[n] = c
		kc.Contexts[n] = &clientcmdapi.Context{Cluster: n, AuthInfo: userName}
	}
	if len(names) > 0 {
		kc.CurrentContext = names[0]
	}
	return kc
}

// clusterFrom is the hub's cluster entry, files by reference as the hub's kubeconfig has them.
func clusterFrom(cfg *rest.Config) *clientcmdapi.Cluster {
	c := &clientcmdapi.Cluster{
		Server:                cfg.Host,
		TLSServerName:         cfg.ServerName,
		InsecureSkipTLSVerify: cfg.Insecure,
		DisableCompression:    cfg.DisableCompression,
	}
	if cfg.CAFile != "" {
		c.CertificateAuthority = cfg.CAFile
	} else {
		c.CertificateAuthorityData = cfg.CAData
	}
	return c
}

// authInfoFrom is the hub's user: the same credential, by reference when the
// hub's kubeconfig refers to files.
func authInfoFrom(cfg *rest.Config) *clientcmdapi.AuthInfo {
	u := &clientcmdapi.AuthInfo{
		Username:             cfg.Username,
		Password:             cfg.Password,
		Impersonate:          cfg.Impersonate.UserName,
		ImpersonateUID:       cfg.Impersonate.UID,
		ImpersonateGroups:    cfg.Impersonate.Groups,
		ImpersonateUserExtra: cfg.Impersonate.Extra,
	}
	if cfg.CertFile != "" {
		u.ClientCertificate = cfg.CertFile
	} else {
		u.ClientCertificateData = cfg.CertData
	}
	if cfg.KeyFile != "" {
		u.ClientKey = cfg.KeyFile
	} else {
		u.ClientKeyData = cfg.KeyData
	}
	if cfg.BearerTokenFile != "" {
		u.TokenFile = cfg.BearerTokenFile
	} else {
		u.Token = cfg.BearerToken
	}
	if cfg.ExecProvider != nil {
		e := *cfg.ExecProvider
		u.Exec = &e
	}
	if cfg.AuthProvider != nil {
		a := *cfg.AuthProvider
		u.AuthProvider = &a
	}
	return u
}

// userName is the hub context's user entry name, so the written kubeconfig
// reads as "the same user".
func (h *hub) userName() (string, error) {
	raw, err := h.flags.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		return "", fmt.Errorf("the hub's kubeconfig: %w", err)
	}
	if *h.flags.AuthInfoName != "" {
		return *h.flags.AuthInfoName, nil
	}
	name := raw.CurrentContext
	if *h.flags.Context != "" {
		name = *h.flags.Context
	}
	if c, ok := raw.Contexts[name]; ok && c.AuthInfo != "" {
		return c.AuthInfo, nil
	}
	return "hub-user", nil
}

// proxyURL is the hub cluster entry's proxy-url (rest.Config keeps only a func).
func (h *hub) proxyURL() string {
	if *h.flags.ProxyURL != "" {
		return *h.flags.ProxyURL
	}
	raw, err := h.flags.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		return ""
	}
	name := raw.CurrentContext
	if *h.flags.Context != "" {
		name = *h.flags.Context
	}
	cluster := *h.flags.ClusterName
	if c, ok := raw.Contexts[name]; ok && cluster == "" {
		cluster = c.Cluster
	}
	if c, ok := raw.Clusters[cluster]; ok {
		return c.ProxyURL
	}
	return ""
}

func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// writeCredentialFile writes a file that holds credentials as a new 0600
// file. Never into what is at path: an existing file keeps its mode and its
// readers' open descriptors while it is rewritten, and a symlink would be
// written through to its target. Without overwrite anything at path,
// a dangling symlink included, is refused (O_EXCL); with it, a new file
// is renamed over path (replacing a symlink itself, not its target).
func writeCredentialFile(path string, data []byte, overwrite bool) error {
	if !overwrite {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("it exists: pass --overwrite to replace it")
		}
		if err != nil {
			return err
		}
		if _, err := f.Write(data); err != nil {
			f.Close()
			os.Remove(path)
			return err
		}
		return f.Close()
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*") // 0600
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after a successful rename, nothing is there
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
