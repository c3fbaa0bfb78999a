package apiserver

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

var (
	// Scheme holds the gateway API and the meta types every API server serves.
	Scheme = runtime.NewScheme()
	// Codecs encode and decode with Scheme.
	Codecs = serializer.NewCodecFactory(Scheme)
	// ParameterCodec decodes query parameters, including the proxy's path option.
	ParameterCodec = runtime.NewParameterCodec(Scheme)
)

func init() {
	utilruntime.Must(v1alpha1.AddToScheme(Scheme))
	utilruntime.Must(Scheme.SetVersionPriority(v1alpha1.SchemeGroupVersion))
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	unversioned := schema.GroupVersion{Group: "", Version: "v1"}
	Scheme.AddUnversionedTypes(unversioned,
		&metav1.Status{},
		&metav1.APIVersions{},
		&metav1.APIGroupList{},
		&metav1.APIGroup{},
		&metav1.APIResourceList{},
	)
}
