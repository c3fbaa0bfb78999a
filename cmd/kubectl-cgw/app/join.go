package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/generated/clientset/versioned"
)

type joinOptions struct {
	name              string
	clusterKubeconfig string
	clusterContext    string
	address           string
	moreAddresses     []string
	serverName        string
	konnectivity      bool
	impersonation     string

	serviceAccount bool
	sa             serviceAccountOptions

	source sourceFlags
}

func newJoinCommand(h *hub) *cobra.Command {
	o := &joinOptions{sa: serviceAccountOptions{name: "cluster-gateway", namespace: "kube-system", duration: 365 * 24 * time.Hour}}
	cmd := &cobra.Command{
		Use:   "join NAME (--cluster-kubeconfig FILE | --credential-secret NAMESPACE/NAME | --credential-provider NAME)",
		Short: "Register a cluster with the hub from its kubeconfig, or update it",
		Long: `Create or update the ClusterGateway NAME on the hub from a managed cluster's kubeconfig: its
server address, its CA, and its credential. Re-running join updates the gateway in place; that
is also how a certificate or token is rotated.

The kubeconfig's credential is stored as it is when it is a client certificate and key, or a
bearer token. Kubeconfigs that authenticate with an exec plugin or an auth provider (EKS, GKE,
OIDC, ...) cannot be stored: with --service-account, join instead uses the kubeconfig to create,
on the managed cluster, a ServiceAccount (--service-account-name in --service-account-namespace)
bound by a ClusterRoleBinding to the ClusterRole you choose with --cluster-role (there is no
default: choose cluster-admin explicitly if the gateway's users need it). It then requests a
token for it (TokenRequest) that lives for --token-duration (default one year; the cluster may
shorten it, join prints the expiry) and stores that token. Re-running join requests a new token;
earlier tokens stay valid until they expire, or until the ServiceAccount is deleted.

Instead of copying a credential, join can name where the gateway reads it, so it follows
every rotation there: --credential-secret NAMESPACE/NAME is a hub Secret that something else
keeps (a Cluster API <cluster>-kubeconfig, an OCM managed-serviceaccount token, a cert-manager
certificate; --credential-secret-format Kubeconfig, Token or TLS, detected when left out), in a
namespace the gateway reads (its --credential-source-namespaces); you need get on that Secret.
A kubeconfig Secret names the server, so no --cluster-kubeconfig is needed; for the others give
--address (the CA comes from the Secret's ca.crt), or --cluster-kubeconfig for the address and CA.
--credential-provider NAME names a credential provider of the gateway's
--credential-providers-file (e.g. one that runs aws eks get-token), with --provider-config or
--provider-config-file as its configuration; the address and CA come from --cluster-kubeconfig
or --address.

--konnectivity registers a cluster that the gateway reaches through its konnectivity
proxy-server (a cluster behind NAT running the konnectivity agent); --address is then the
API server's address as the agent dials it. Without --konnectivity, --address overrides the
kubeconfig's server, for when the gateway reaches the cluster at another address than you do.

Nothing is left half-made: if the cluster cannot be reached or refuses a step, or the hub
refuses the write, what join created on the cluster is removed again.

Needs get, create and update on clustergateways on the hub.`,
		Example: `  # A kubeconfig with a client certificate or a token: stored as it is
  kubectl cgw join prod-eu --cluster-kubeconfig prod-eu.kubeconfig

  # One context of a kubeconfig with several
  kubectl cgw join staging --cluster-kubeconfig ~/.kube/config --cluster-context staging-admin

  # An EKS/GKE/OIDC kubeconfig (exec plugin): a ServiceAccount with the view role, its token stored
  kubectl cgw join prod-us --cluster-kubeconfig eks.kubeconfig --service-account --cluster-role view

  # A Cluster API cluster: its kubeconfig Secret on the hub, read and followed by the gateway
  kubectl cgw join prod-eu --credential-secret capi-clusters/prod-eu-kubeconfig

  # An OCM managed-serviceaccount token Secret (token, ca.crt) and the cluster's address
  kubectl cgw join prod-us --credential-secret prod-us/cluster-gateway \
    --credential-secret-format Token --address https://prod-us.example.com:6443

  # An EKS cluster through the gateway's credential provider "eks"; address and CA from the kubeconfig
  kubectl cgw join prod-ap --cluster-kubeconfig eks.kubeconfig \
    --credential-provider eks --provider-config '{"clusterName":"prod-ap","region":"ap-south-1"}'

  # A cluster behind NAT, reached through the konnectivity tunnel: the agent there answers
  # for the name edge-7.clusters.internal (docs/install.md#konnectivity)
  kubectl cgw join edge-7 --cluster-kubeconfig edge-7.kubeconfig \
    --konnectivity --address https://edge-7.clusters.internal:443 --server-name kubernetes.default.svc`,
		Args: exactlyOneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.name = args[0]
			return o.run(cmd.Context(), h)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.clusterKubeconfig, "cluster-kubeconfig", "", "The managed cluster's kubeconfig file (required unless --credential-secret or --credential-provider says where the credential is).")
	f.StringVar(&o.clusterContext, "cluster-context", "", "The context of --cluster-kubeconfig to use (default: its current context).")
	f.StringVar(&o.address, "address", "", "The API server URL the gateway dials (default: the kubeconfig's server). With --konnectivity, as the agent dials it.")
	f.StringArrayVar(&o.moreAddresses, "additional-address", nil, "Another API server URL of the same cluster (same CA and credential), e.g. another control-plane node; repeat for each. The gateway spreads requests over --address (or the kubeconfig's server) and these.")
	f.StringVar(&o.serverName, "server-name", "", "The name the cluster's serving certificate is verified against (default: the kubeconfig's tls-server-name, else the host of the address), e.g. kubernetes.default.svc when --address is a name only the tunnel knows.")
	f.BoolVar(&o.konnectivity, "konnectivity", false, "Reach the cluster through the gateway's konnectivity proxy-server (endpoint type Konnectivity).")
	f.StringVar(&o.impersonation, "impersonation", "", "None (the cluster sees the stored credential) or Caller (it sees the hub user, impersonated). Default: unchanged, None for a new gateway.")
	f.BoolVar(&o.serviceAccount, "service-account", false, "Store the token of a ServiceAccount created on the cluster instead of the kubeconfig's credential. Needs --cluster-role.")
	f.StringVar(&o.sa.clusterRole, "cluster-role", "", "With --service-account: the ClusterRole to bind the ServiceAccount to (e.g. view, edit, cluster-admin).")
	f.StringVar(&o.sa.name, "service-account-name", o.sa.name, "With --service-account: the ServiceAccount's name.")
	f.StringVar(&o.sa.namespace, "service-account-namespace", o.sa.namespace, "With --service-account: its namespace, which must exist.")
	f.DurationVar(&o.sa.duration, "token-duration", o.sa.duration, "With --service-account: how long the token lives (at least 10m; the cluster may shorten it).")
	f.StringVar(&o.source.secret, "credential-secret", "", "NAMESPACE/NAME of a hub Secret the gateway reads the credential from and follows (instead of storing one); you need get on it.")
	f.StringVar(&o.source.secretFormat, "credential-secret-format", "", "With --credential-secret: Kubeconfig, Token or TLS (default: detected from the Secret's data).")
	f.StringVar(&o.source.provider, "credential-provider", "", "The name of a credential provider in the gateway's --credential-providers-file, which gives the credential (instead of storing one).")
	f.StringVar(&o.source.providerConfig, "provider-config", "", "With --credential-provider: its configuration for this cluster, a JSON object (spec.credential.provider.config).")
	f.StringVar(&o.source.providerConfigFile, "provider-config-file", "", "With --credential-provider: a JSON or YAML file holding its configuration for this cluster.")
	return cmd
}

func exactlyOneName(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("%s needs exactly one NAME, the cluster's name on the hub (got %d arguments)\nSee '%s --help'.", cmd.Name(), len(args), cmd.CommandPath())
	}
	if errs := validation.IsDNS1123Subdomain(args[0]); len(errs) > 0 {
		return fmt.Errorf("%q cannot be a ClusterGateway name: %s", args[0], strings.Join(errs, "; "))
	}
	return nil
}

func (o *joinOptions) validate() error {
	if err := o.source.validate(); err != nil {
		return err
	}
	switch {
	case o.source.any() && o.serviceAccount:
		return fmt.Errorf("--%s names where the gateway reads the credential, and --service-account creates one for it to store: choose one", o.sourceFlag())
	case o.clusterKubeconfig == "" && o.clusterContext != "":
		return errors.New("--cluster-context only applies with --cluster-kubeconfig")
	case o.source.provider != "" && o.clusterKubeconfig == "" && o.address == "":
		return errors.New("--credential-provider gives the credential, not where the cluster is: pass --address URL, or --cluster-kubeconfig FILE for the address and CA")
	}
	switch {
	case o.serviceAccount && o.sa.clusterRole == "":
		return errors.New("--service-account needs --cluster-role: the ClusterRole the ServiceAccount is bound to on the cluster " +
			"(e.g. view, edit, or cluster-admin for full access; there is no default)")
	case !o.serviceAccount && o.sa.clusterRole != "":
		return errors.New("--cluster-role only applies with --service-account")
	case o.serviceAccount && o.sa.duration < 10*time.Minute:
		return fmt.Errorf("--token-duration %s is too short: a TokenRequest needs at least 10m", o.sa.duration)
	}
	switch gatewayv1alpha1.ImpersonationMode(o.impersonation) {
	case "", gatewayv1alpha1.ImpersonationNone, gatewayv1alpha1.ImpersonationCaller:
	default:
		return fmt.Errorf("--impersonation must be None or Caller, not %q", o.impersonation)
	}
	return nil
}

// sourceFlag is the flag that names the credential's source.
func (o *joinOptions) sourceFlag() string {
	if o.source.secret != "" {
		return "credential-secret"
	}
	return "credential-provider"
}

func (o *joinOptions) run(ctx context.Context, h *hub) error {
	if err := o.validate(); err != nil {
		return err
	}
	var (
		src  *source
		cred gatewayv1alpha1.Credential
		err  error
	)
	if o.source.any() {
		if cred, err = o.source.credential(); err != nil {
			return err
		}
	}
	// The cluster's kubeconfig gives the endpoint and, unless a source or
	// --service-account does, the credential.
	ep := gatewayv1alpha1.Endpoint{Type: gatewayv1alpha1.EndpointDirect, Address: o.address, ServerName: o.serverName}
	if o.konnectivity {
		ep.Type = gatewayv1alpha1.EndpointKonnectivity
	}
	from := "--address"
	if o.clusterKubeconfig != "" || !o.source.any() {
		if src, err = loadSource(o.clusterKubeconfig, o.clusterContext); err != nil {
			return err
		}
		if !o.serviceAccount && !o.source.any() {
			if cred, err = src.credential(); err != nil {
				return err
			}
		}
		if src.config.Insecure {
			fmt.Fprintf(h.streams.ErrOut, "Warning: %s skips TLS verification of the cluster; so will the gateway. Put the cluster's CA in the kubeconfig instead.\n", src.file)
		}
		ep, from = src.endpoint(o.address, o.serverName, o.konnectivity), src.file+", or --address"
	}

	// Addresses the gateway (and join, minting a token) would use are checked
	// before anything is sent to the hub or the cluster: a token must not
	// travel over http. Only a kubeconfig Secret may leave the address out.
	ep.AdditionalAddresses = o.moreAddresses
	var addresses []string
	if ep.Address != "" || cred.Type != gatewayv1alpha1.CredentialSecretRef {
		addresses = append(addresses, ep.Address)
	}
	addresses = append(addresses, o.moreAddresses...)
	if o.serviceAccount {
		addresses = append(addresses, src.config.Host)
	}
	for _, a := range addresses {
		if _, err := gatewayv1alpha1.ParseAddress(a); err != nil {
			return fmt.Errorf("the cluster's address %s %v (from %s, or --additional-address)", gatewayv1alpha1.WithoutUserInfo(a), err, from)
		}
	}
	if ep.ProxyURL != "" {
		if _, err := gatewayv1alpha1.ParseProxyURL(ep.ProxyURL); err != nil {
			return fmt.Errorf("the cluster's proxy-url %s %v (from %s)", gatewayv1alpha1.WithoutUserInfo(ep.ProxyURL), err, src.file)
		}
	}

	// Ask the hub first, so a refusal there touches nothing on the cluster.
	gc, hubCfg, err := h.client()
	if err != nil {
		return err
	}
	existing, err := o.checkHub(ctx, gc, hubCfg)
	if err != nil {
		return err
	}
	if cred.Type == gatewayv1alpha1.CredentialSecretRef {
		kc, err := kubernetes.NewForConfig(hubCfg)
		if err != nil {
			return err
		}
		if err := checkSecret(ctx, kc, cred.SecretRef, ep.Address == ""); err != nil {
			return err
		}
	}

	var setup *serviceAccountSetup
	if o.serviceAccount {
		var token string
		logf := func(format string, args ...any) { fmt.Fprintf(h.streams.ErrOut, format+"\n", args...) }
		if setup, token, err = o.sa.setup(ctx, src, logf); err != nil {
			return err
		}
		cred = gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialBearerToken, BearerToken: token}
	}

	gw, verb, err := o.write(ctx, gc, existing, ep, cred)
	if err != nil {
		err = hubError(fmt.Sprintf("write ClusterGateway %q", o.name), err)
		if setup != nil {
			return setup.undo.errorAfterUndo(err)
		}
		return err
	}
	fmt.Fprintf(h.streams.Out, "clustergateway.gateway.clustergateway.io/%s %s\n", gw.Name, verb)
	if o.source.any() {
		gw = waitReady(ctx, gc, gw)
		if c := gw.Status.Credential; c != nil && c.Source != "" {
			fmt.Fprintf(h.streams.Out, "The gateway reads its credential from %s and follows its rotation.\n", c.Source)
		}
	}
	fmt.Fprintf(h.streams.Out, "Reach it through the hub: kubectl cgw kubeconfig %s -o %s.kubeconfig\n", gw.Name, gw.Name)
	if c := condition(gw, gatewayv1alpha1.ConditionReady); c != nil && c.Status != metav1.ConditionTrue {
		return fmt.Errorf("the hub stored ClusterGateway %q, but it is not Ready: %s: %s", gw.Name, c.Reason, c.Message)
	}
	return nil
}

// checkHub returns the gateway if it exists, and fails unless the caller may
// write it.
func (o *joinOptions) checkHub(ctx context.Context, gc versioned.Interface, hubCfg *rest.Config) (*gatewayv1alpha1.ClusterGateway, error) {
	existing, err := gc.GatewayV1alpha1().ClusterGateways().Get(ctx, o.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) && !isResourceMissing(err):
		existing = nil
	case err != nil:
		return nil, hubError(fmt.Sprintf("get ClusterGateway %q", o.name), err)
	}
	verb := "create"
	if existing != nil {
		verb = "update"
	}
	kc, err := kubernetes.NewForConfig(hubCfg)
	if err != nil {
		return nil, err
	}
	review, err := kc.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: verb, Group: gatewayv1alpha1.SchemeGroupVersion.Group, Resource: "clustergateways", Name: o.name,
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, hubError("check your permissions", err)
	}
	if !review.Status.Allowed {
		why := ""
		if review.Status.Reason != "" {
			why = " (" + review.Status.Reason + ")"
		}
		return nil, fmt.Errorf("the hub would refuse to %s ClusterGateway %q: you may not %s clustergateways.gateway.clustergateway.io%s\n"+
			"(ask a hub administrator for get, create and update on clustergateways; docs/api.md#rbac has an example role)", verb, o.name, verb, why)
	}
	return existing, nil
}

// write creates the gateway or replaces its endpoint and credential. It
// always sends the credential: the API never returns it, and an update that
// changes the endpoint must carry it again.
func (o *joinOptions) write(ctx context.Context, gc versioned.Interface, existing *gatewayv1alpha1.ClusterGateway,
	ep gatewayv1alpha1.Endpoint, cred gatewayv1alpha1.Credential) (*gatewayv1alpha1.ClusterGateway, string, error) {
	gws := gc.GatewayV1alpha1().ClusterGateways()
	if existing == nil {
		gw := &gatewayv1alpha1.ClusterGateway{
			ObjectMeta: metav1.ObjectMeta{Name: o.name},
			Spec: gatewayv1alpha1.ClusterGatewaySpec{
				Endpoint:      ep,
				Credential:    cred,
				Impersonation: gatewayv1alpha1.Impersonation{Mode: gatewayv1alpha1.ImpersonationMode(o.impersonation)},
			},
		}
		created, err := gws.Create(ctx, gw, metav1.CreateOptions{FieldManager: "kubectl-cgw"})
		if err == nil || !apierrors.IsAlreadyExists(err) {
			return created, "created", err
		}
		// Someone created it since we looked: update it instead.
		if existing, err = gws.Get(ctx, o.name, metav1.GetOptions{}); err != nil {
			return nil, "", err
		}
	}
	var updated *gatewayv1alpha1.ClusterGateway
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		gw := existing.DeepCopy()
		gw.Spec.Endpoint, gw.Spec.Credential = ep, cred
		if o.impersonation != "" {
			gw.Spec.Impersonation.Mode = gatewayv1alpha1.ImpersonationMode(o.impersonation)
		}
		var err error
		updated, err = gws.Update(ctx, gw, metav1.UpdateOptions{FieldManager: "kubectl-cgw"})
		if apierrors.IsConflict(err) {
			if latest, getErr := gws.Get(ctx, o.name, metav1.GetOptions{}); getErr == nil {
				existing = latest
			}
		}
		return err
	})
	return updated, "configured", err
}
