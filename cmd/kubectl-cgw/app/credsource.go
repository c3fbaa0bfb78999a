package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/generated/clientset/versioned"
)

// A credential source: join names where the gateway reads the credential
// (a hub Secret, or a credential provider configured on the gateway)
// instead of copying material into the gateway.
type sourceFlags struct {
	secret, secretFormat               string
	provider                           string
	providerConfig, providerConfigFile string
}

// The data keys of a kubeconfig Secret (Cluster API's "value", or "kubeconfig").
var kubeconfigKeys = []string{gatewayv1alpha1.SecretKeyKubeconfigCAPI, gatewayv1alpha1.SecretKeyKubeconfig}

func (s *sourceFlags) any() bool { return s.secret != "" || s.provider != "" }

// validate checks the source flags by themselves.
func (s *sourceFlags) validate() error {
	switch {
	case s.secret != "" && s.provider != "":
		return errors.New("--credential-secret and --credential-provider both say where the gateway reads the credential: choose one")
	case s.secretFormat != "" && s.secret == "":
		return errors.New("--credential-secret-format only applies with --credential-secret NAMESPACE/NAME")
	case (s.providerConfig != "" || s.providerConfigFile != "") && s.provider == "":
		return errors.New("--provider-config and --provider-config-file only apply with --credential-provider NAME")
	case s.providerConfig != "" && s.providerConfigFile != "":
		return errors.New("--provider-config and --provider-config-file both give the provider's configuration: choose one")
	}
	if s.secret != "" {
		if _, err := s.secretRef(); err != nil {
			return err
		}
	}
	if s.provider != "" {
		if errs := validation.IsDNS1123Subdomain(s.provider); len(errs) > 0 {
			return fmt.Errorf("--credential-provider %q is not a provider name (%s): use a name from the gateway's --credential-providers-file", s.provider, strings.Join(errs, "; "))
		}
	}
	return nil
}

// secretRef parses --credential-secret NAMESPACE/NAME and --credential-secret-format.
func (s *sourceFlags) secretRef() (*gatewayv1alpha1.SecretReference, error) {
	ns, name, ok := strings.Cut(s.secret, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("--credential-secret %q must be NAMESPACE/NAME, the hub Secret that holds the credential (e.g. capi-clusters/prod-eu-kubeconfig)", s.secret)
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return nil, fmt.Errorf("--credential-secret %q: %q is not a namespace name: %s", s.secret, ns, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, fmt.Errorf("--credential-secret %q: %q is not a Secret name: %s", s.secret, name, strings.Join(errs, "; "))
	}
	format := gatewayv1alpha1.SecretFormat(s.secretFormat)
	if format != "" && !slices.Contains(gatewayv1alpha1.SecretFormats, format) {
		return nil, fmt.Errorf("--credential-secret-format must be Kubeconfig, Token or TLS (or left out to detect it from the Secret's data), not %q", s.secretFormat)
	}
	return &gatewayv1alpha1.SecretReference{Namespace: ns, Name: name, Format: format}, nil
}

// credential is the ClusterGateway credential that names the source.
func (s *sourceFlags) credential() (gatewayv1alpha1.Credential, error) {
	if s.secret != "" {
		ref, err := s.secretRef()
		if err != nil {
			return gatewayv1alpha1.Credential{}, err
		}
		return gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialSecretRef, SecretRef: ref}, nil
	}
	ref := &gatewayv1alpha1.ProviderReference{Name: s.provider}
	raw, from := []byte(s.providerConfig), "--provider-config"
	if s.providerConfigFile != "" {
		b, err := os.ReadFile(s.providerConfigFile)
		if err != nil {
			return gatewayv1alpha1.Credential{}, fmt.Errorf("cannot read --provider-config-file: %v", err)
		}
		raw, from = b, "--provider-config-file "+s.providerConfigFile
	}
	if len(bytes.TrimSpace(raw)) > 0 {
		cfg, err := providerConfig(raw)
		if err != nil {
			return gatewayv1alpha1.Credential{}, fmt.Errorf("%s %v: give the provider's configuration as a JSON or YAML object, e.g. '{\"clusterName\":\"prod\",\"region\":\"eu-west-1\"}'", from, err)
		}
		ref.Config = &runtime.RawExtension{Raw: cfg}
	}
	return gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialProvider, Provider: ref}, nil
}

// providerConfig is raw (JSON or YAML) as compact JSON, if it is an object.
func providerConfig(raw []byte) ([]byte, error) {
	j, err := utilyaml.ToJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("is neither JSON nor YAML: %v", err)
	}
	var obj map[string]any
	if err := json.Unmarshal(j, &obj); err != nil || obj == nil {
		return nil, errors.New("is not an object")
	}
	return json.Marshal(obj)
}

// checkSecret asks the hub, before anything is written, what the hub would
// refuse or the gateway could not use: the caller must be allowed to get
// the Secret (the hub refuses to send a credential its writer could not
// read), and with no address given, the Secret must be a kubeconfig, the
// only format that names the server.
func checkSecret(ctx context.Context, kc kubernetes.Interface, ref *gatewayv1alpha1.SecretReference, needServer bool) error {
	review, err := kc.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: "get", Resource: "secrets", Namespace: ref.Namespace, Name: ref.Name,
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		return hubError("check your permissions", err)
	}
	if !review.Status.Allowed {
		return fmt.Errorf("the hub would refuse to name Secret %s/%s as the credential: you may not get it, and a ClusterGateway may only send "+
			"credentials its writer could read (ask a hub administrator for get on secrets in namespace %s)", ref.Namespace, ref.Name, ref.Namespace)
	}
	if !needServer {
		return nil
	}
	switch ref.Format {
	case gatewayv1alpha1.SecretFormatKubeconfig:
		return nil
	case gatewayv1alpha1.SecretFormatToken, gatewayv1alpha1.SecretFormatTLS:
		return errNoServer(ref, fmt.Sprintf("a %s Secret names no server", ref.Format))
	}
	sec, err := kc.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("Secret %s/%s does not exist on the hub, so join cannot tell whether it will be a kubeconfig that names the server: "+
			"pass --address URL, or --credential-secret-format Kubeconfig if it will be one", ref.Namespace, ref.Name)
	case err != nil:
		return fmt.Errorf("cannot read Secret %s/%s on the hub to see whether it is a kubeconfig: %v (pass --address URL, or --credential-secret-format)", ref.Namespace, ref.Name, err)
	}
	for _, k := range kubeconfigKeys {
		if len(sec.Data[k]) > 0 {
			return nil
		}
	}
	return errNoServer(ref, "it holds no kubeconfig (data key value or kubeconfig), and only a kubeconfig names the server")
}

func errNoServer(ref *gatewayv1alpha1.SecretReference, why string) error {
	return fmt.Errorf("the gateway cannot tell where the cluster is from Secret %s/%s: %s; pass --address URL "+
		"(the CA comes from the Secret's ca.crt, or from --cluster-kubeconfig with the address and TLS settings)", ref.Namespace, ref.Name, why)
}

// sourceReadyWait is how long join waits for a gateway whose credential has
// a source to become Ready: a replica may not have seen the Secret yet, or
// the provider may not have answered.
var sourceReadyWait = 5 * time.Second

// waitReady returns gw, or the gateway as read again, once Ready, or the
// last one read when sourceReadyWait has passed.
func waitReady(ctx context.Context, gc versioned.Interface, gw *gatewayv1alpha1.ClusterGateway) *gatewayv1alpha1.ClusterGateway {
	deadline := time.Now().Add(sourceReadyWait)
	for {
		if c := condition(gw, gatewayv1alpha1.ConditionReady); c == nil || c.Status == metav1.ConditionTrue || !time.Now().Before(deadline) {
			return gw
		}
		select {
		case <-ctx.Done():
			return gw
		case <-time.After(250 * time.Millisecond):
		}
		if latest, err := gc.GatewayV1alpha1().ClusterGateways().Get(ctx, gw.Name, metav1.GetOptions{}); err == nil {
			gw = latest
		}
	}
}
