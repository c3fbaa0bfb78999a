package inventory

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// ClusterProfileResource is the ClusterProfile API of
// sigs.k8s.io/cluster-inventory-api (namespaced). Its Go module is not
// used: the sync reads the few fields it needs from unstructured objects.
var ClusterProfileResource = schema.GroupVersionResource{Group: "multicluster.x-k8s.io", Version: "v1alpha1", Resource: "clusterprofiles"}

// execExtension is the kubeconfig cluster extension whose value client-go
// passes to an exec plugin as the ExecCredential's spec.cluster.config
// (KEP-5339's per-cluster provider configuration).
const execExtension = "client.authentication.k8s.io/exec"

// KEP-5339's reserved extensions: args appended to the provider's (a list
// of strings) and variables added to its environment (a map of names to
// values), each only as the provider file's policy allows. A ClusterProfile
// writer never names the command: the provider file does.
const (
	additionalArgsExtension = "clusterprofiles.multicluster.x-k8s.io/exec/additional-args"
	additionalEnvsExtension = "clusterprofiles.multicluster.x-k8s.io/exec/additional-envs"
)

// accessProvider is an entry of a ClusterProfile's status.accessProviders
// (or the deprecated status.credentialProviders): a provider's name and the
// cluster as that provider reaches it.
type accessProvider struct {
	Name    string              `json:"name"`
	Cluster clientcmdv1.Cluster `json:"cluster,omitempty"`
}

// profileGateway is the gateway a ClusterProfile asks for: the first of its
// access providers that is one of providers, with that provider's cluster as
// the endpoint and its exec extension as the provider's config. It is nil
// when the profile names none of providers; an error says why a profile
// that names one cannot be used.
func profileGateway(p *unstructured.Unstructured, providers []string) (*v1alpha1.ClusterGateway, error) {
	ap, err := chooseProvider(p, providers)
	if ap == nil || err != nil {
		return nil, err
	}
	c := ap.Cluster
	if c.InsecureSkipTLSVerify {
		return nil, fmt.Errorf("its access provider %q skips TLS verification of the cluster (insecure-skip-tls-verify): the gateway does not send a credential unverified; give the cluster's certificate-authority-data", ap.Name)
	}
	if c.CertificateAuthority != "" {
		// A path names a file on the reader's machine: the gateway reads no
		// file a ClusterProfile writer names, and verifying against the
		// system roots instead would trust more than the profile asked for.
		return nil, fmt.Errorf("its access provider %q names a certificate-authority file (%q): the gateway reads no file a ClusterProfile names; give the cluster's certificate-authority-data instead", ap.Name, c.CertificateAuthority)
	}
	ref := &v1alpha1.ProviderReference{Name: ap.Name}
	for _, ext := range c.Extensions {
		switch {
		case len(ext.Extension.Raw) == 0:
		case ext.Name == execExtension:
			ref.Config = &runtime.RawExtension{Raw: ext.Extension.Raw}
		case ext.Name == additionalArgsExtension:
			// Carried whatever the provider file's policy: the launcher
			// applies them only as it allows, and the file may change.
			if err := json.Unmarshal(ext.Extension.Raw, &ref.AdditionalArgs); err != nil {
				return nil, fmt.Errorf("its access provider %q has a %s extension that is not a list of strings: %v", ap.Name, additionalArgsExtension, err)
			}
		case ext.Name == additionalEnvsExtension:
			var env map[string]string
			if err := json.Unmarshal(ext.Extension.Raw, &env); err != nil {
				return nil, fmt.Errorf("its access provider %q has a %s extension that is not a map of names to string values: %v", ap.Name, additionalEnvsExtension, err)
			}
			for _, k := range slices.Sorted(maps.Keys(env)) { // stored in one order: no rewrite for a map's
				ref.AdditionalEnv = append(ref.AdditionalEnv, v1alpha1.ProviderEnvVar{Name: k, Value: env[k]})
			}
		}
	}
	return synced(SourceClusterProfile, &metav1.ObjectMeta{Namespace: p.GetNamespace(), Name: p.GetName(), UID: p.GetUID()}, v1alpha1.ClusterGatewaySpec{
		Endpoint: v1alpha1.Endpoint{
			Address:    c.Server,
			CABundle:   c.CertificateAuthorityData,
			ServerName: c.TLSServerName,
			ProxyURL:   c.ProxyURL,
		},
		Credential: v1alpha1.Credential{Type: v1alpha1.CredentialProvider, Provider: ref},
	}), nil
}

// chooseProvider returns the profile's first access provider named in
// providers: status.accessProviders, then status.credentialProviders,
// whose entry of the same name accessProviders overrides (as the API says).
func chooseProvider(p *unstructured.Unstructured, providers []string) (*accessProvider, error) {
	var listed []accessProvider
	for _, field := range []string{"accessProviders", "credentialProviders"} {
		raw, ok, _ := unstructured.NestedFieldNoCopy(p.Object, "status", field)
		if !ok {
			continue
		}
		b, err := json.Marshal(raw)
		if err != nil {
			return nil, err
		}
		var aps []accessProvider
		if err := json.Unmarshal(b, &aps); err != nil {
			return nil, fmt.Errorf("status.%s cannot be read: %v", field, err)
		}
		for _, ap := range aps {
			if !slices.ContainsFunc(listed, func(l accessProvider) bool { return l.Name == ap.Name }) {
				listed = append(listed, ap)
			}
		}
	}
	for _, ap := range listed {
		if slices.Contains(providers, ap.Name) {
			return &ap, nil
		}
	}
	return nil, nil
}
