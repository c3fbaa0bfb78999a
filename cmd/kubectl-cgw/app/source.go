package app

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// source is the managed cluster as its kubeconfig describes it.
type source struct {
	file, context string
	cluster       *clientcmdapi.Cluster
	userName      string
	user          *clientcmdapi.AuthInfo
	// config reaches the cluster as the kubeconfig's user, with the CA,
	// client certificate and key loaded from their files.
	config *rest.Config
}

// loadSource reads file and picks context (the current context if empty).
func loadSource(file, context string) (*source, error) {
	if file == "" {
		return nil, errors.New("--cluster-kubeconfig is required: the kubeconfig of the cluster to join " +
			"(or name where the gateway reads the credential: --credential-secret NAMESPACE/NAME or --credential-provider NAME)")
	}
	if _, err := os.Stat(file); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("cannot read the cluster's kubeconfig %s: no such file (pass the managed cluster's kubeconfig with --cluster-kubeconfig)", file)
		}
		return nil, fmt.Errorf("cannot read the cluster's kubeconfig: %v", err)
	}
	// The loading rules resolve relative certificate and token paths against
	// the kubeconfig's directory, as kubectl does.
	raw, err := (&clientcmd.ClientConfigLoadingRules{ExplicitPath: file}).Load()
	if err != nil {
		return nil, fmt.Errorf("cannot read the cluster's kubeconfig %s: %v", file, err)
	}
	if len(raw.Contexts) == 0 {
		return nil, fmt.Errorf("%s has no contexts: is it a kubeconfig? (`kubectl config view --kubeconfig %s` shows what it holds)", file, file)
	}
	if context == "" {
		context = raw.CurrentContext
		if context == "" {
			return nil, fmt.Errorf("%s has no current-context: choose one with --cluster-context (it has %s)", file, contextNames(raw))
		}
	}
	ctx, ok := raw.Contexts[context]
	if !ok {
		return nil, fmt.Errorf("context %q not found in %s: choose one of %s with --cluster-context", context, file, contextNames(raw))
	}
	cluster, ok := raw.Clusters[ctx.Cluster]
	if !ok {
		return nil, fmt.Errorf("context %q of %s names cluster %q, which the file does not have", context, file, ctx.Cluster)
	}
	user, ok := raw.AuthInfos[ctx.AuthInfo]
	if !ok {
		return nil, fmt.Errorf("context %q of %s names user %q, which the file does not have", context, file, ctx.AuthInfo)
	}
	cfg, err := clientcmd.NewNonInteractiveClientConfig(*raw, context, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("context %q of %s: %v", context, file, err)
	}
	if err := rest.LoadTLSFiles(cfg); err != nil {
		return nil, fmt.Errorf("context %q of %s: %v", context, file, err)
	}
	return &source{file: file, context: context, cluster: cluster, userName: ctx.AuthInfo, user: user, config: cfg}, nil
}

// checkValidity refuses a client certificate that is expired or not yet
// valid: the gateway could not use it, whatever the hub accepts.
func checkValidity(certPEM []byte, now time.Time) error {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return errors.New("is not PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return fmt.Errorf("does not parse: %v", err)
	}
	switch {
	case now.After(cert.NotAfter):
		return fmt.Errorf("expired at %s", cert.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(cert.NotBefore):
		return fmt.Errorf("is not valid before %s", cert.NotBefore.UTC().Format(time.RFC3339))
	}
	return nil
}

func contextNames(raw *clientcmdapi.Config) string {
	var names []string
	for n := range raw.Contexts {
		names = append(names, fmt.Sprintf("%q", n))
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// endpoint is where the gateway dials: the kubeconfig's server and TLS
// settings, or address and serverName; through the konnectivity tunnel if konnectivity.
func (s *source) endpoint(address, serverName string, konnectivity bool) gatewayv1alpha1.Endpoint {
	ep := gatewayv1alpha1.Endpoint{
		Type:                  gatewayv1alpha1.EndpointDirect,
		Address:               s.config.Host,
		CABundle:              s.config.CAData,
		ServerName:            s.config.ServerName,
		InsecureSkipTLSVerify: s.config.Insecure,
		ProxyURL:              s.cluster.ProxyURL,
	}
	if address != "" {
		ep.Address = address
	}
	if serverName != "" {
		ep.ServerName = serverName
	}
	if konnectivity {
		// The kubeconfig's proxy is how this machine reaches the cluster; the
		// agent dials from inside it.
		ep.Type, ep.ProxyURL = gatewayv1alpha1.EndpointKonnectivity, ""
	}
	return ep
}

// errNeedsServiceAccount is a kubeconfig whose credential the gateway cannot store.
type errNeedsServiceAccount struct{ source, how string }

func (e *errNeedsServiceAccount) Error() string {
	return fmt.Sprintf("%s authenticates %s, which the gateway cannot use: re-run with "+
		"--service-account --cluster-role ROLE to create a ServiceAccount on the cluster, bound to ROLE, and store its token instead", e.source, e.how)
}

// credential is the kubeconfig's own credential, if the gateway can store it:
// a client certificate and key, or a bearer token (read from its file).
func (s *source) credential() (gatewayv1alpha1.Credential, error) {
	who := fmt.Sprintf("user %q of context %q in %s", s.userName, s.context, s.file)
	switch {
	case s.user.Exec != nil:
		return gatewayv1alpha1.Credential{}, &errNeedsServiceAccount{who, fmt.Sprintf("with the exec plugin %q", s.user.Exec.Command)}
	case s.user.AuthProvider != nil:
		return gatewayv1alpha1.Credential{}, &errNeedsServiceAccount{who, fmt.Sprintf("with the auth provider %q", s.user.AuthProvider.Name)}
	case s.config.Impersonate.UserName != "" || s.config.Impersonate.UID != "" || len(s.config.Impersonate.Groups) > 0 || len(s.config.Impersonate.Extra) > 0:
		// Stored alone, the credential would act as its own (often admin) identity.
		return gatewayv1alpha1.Credential{}, &errNeedsServiceAccount{who, fmt.Sprintf("as %q (impersonation, which a stored credential cannot carry)", s.config.Impersonate.UserName)}
	case len(s.config.CertData) > 0 && len(s.config.KeyData) > 0:
		if err := checkValidity(s.config.CertData, time.Now()); err != nil {
			return gatewayv1alpha1.Credential{}, fmt.Errorf("the client certificate of %s %v: get a current kubeconfig for the cluster, or use --service-account", who, err)
		}
		return gatewayv1alpha1.Credential{
			Type: gatewayv1alpha1.CredentialX509Certificate,
			X509: &gatewayv1alpha1.X509Credential{Certificate: s.config.CertData, PrivateKey: s.config.KeyData},
		}, nil
	case strings.TrimSpace(s.config.BearerToken) != "":
		return gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialBearerToken, BearerToken: strings.TrimSpace(s.config.BearerToken)}, nil
	case s.config.Username != "":
		return gatewayv1alpha1.Credential{}, &errNeedsServiceAccount{who, "with a username and password"}
	}
	return gatewayv1alpha1.Credential{}, &errNeedsServiceAccount{who, "with no client certificate or token"}
}
