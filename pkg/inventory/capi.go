package inventory

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// Cluster API's kubeconfig Secret: <cluster>-kubeconfig, of this type, with
// the cluster's name in this label and the kubeconfig under data "value".
const (
	capiSecretType   corev1.SecretType = "cluster.x-k8s.io/secret"
	capiClusterLabel                   = "cluster.x-k8s.io/cluster-name"
	capiNameSuffix                     = "-kubeconfig"
)

// capiSecret keeps of a Secret only what the sync reads: never the
// kubeconfig (the gateway's credential sources read it), only whether it
// has one.
func capiSecret(s *corev1.Secret) *corev1.Secret {
	out := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name, UID: s.UID, ResourceVersion: s.ResourceVersion, Labels: s.Labels},
		Type:       s.Type,
	}
	if _, ok := s.Data[v1alpha1.SecretKeyKubeconfigCAPI]; ok {
		out.Data = map[string][]byte{v1alpha1.SecretKeyKubeconfigCAPI: nil}
	}
	return out
}

// capiGateway is the gateway a Cluster API kubeconfig Secret asks for, or
// nil when the Secret is not one: its credential is the Secret by
// reference, and its endpoint is the kubeconfig's (the address left empty).
func capiGateway(s *corev1.Secret) *v1alpha1.ClusterGateway {
	cluster := s.Labels[capiClusterLabel]
	if s.Type != capiSecretType || cluster == "" || s.Name != cluster+capiNameSuffix {
		return nil
	}
	if _, ok := s.Data[v1alpha1.SecretKeyKubeconfigCAPI]; !ok {
		return nil
	}
	return synced(SourceCAPI, &s.ObjectMeta, v1alpha1.ClusterGatewaySpec{
		Credential: v1alpha1.Credential{
			Type:      v1alpha1.CredentialSecretRef,
			SecretRef: &v1alpha1.SecretReference{Namespace: s.Namespace, Name: s.Name, Format: v1alpha1.SecretFormatKubeconfig},
		},
	})
}

// synced is the gateway for the source object src: named after it, marked
// as synced from it, with spec (defaulted).
func synced(from Source, src *metav1.ObjectMeta, spec v1alpha1.ClusterGatewaySpec) *v1alpha1.ClusterGateway {
	gw := &v1alpha1.ClusterGateway{
		ObjectMeta: metav1.ObjectMeta{
			Name:        gatewayNameFor(from, src.Namespace, src.Name),
			Labels:      map[string]string{LabelSyncedFrom: string(from)},
			Annotations: map[string]string{AnnotationSource: src.Namespace + "/" + src.Name, AnnotationSourceUID: string(src.UID)},
		},
		Spec: spec,
	}
	v1alpha1.SetDefaults_ClusterGateway(gw)
	return gw
}

// gatewayNameFor is the gateway synced from the object namespace/name of
// inventory from: a Cluster API Secret's gateway is named after its cluster.
func gatewayNameFor(from Source, namespace, name string) string {
	if from == SourceCAPI {
		name = strings.TrimSuffix(name, capiNameSuffix)
	}
	return GatewayName(namespace, name)
}
