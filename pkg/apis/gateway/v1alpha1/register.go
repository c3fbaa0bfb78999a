package v1alpha1

import (
	"fmt"
	"net/url"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of the gateway.
const GroupName = "gateway.clustergateway.io"

// SchemeGroupVersion is the only served version.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

// InternalGroupVersion is the hub-internal version. The gateway serves one
// version, so the internal form is the same Go type and conversion is a copy.
var InternalGroupVersion = schema.GroupVersion{Group: GroupName, Version: runtime.APIVersionInternal}

// Resource returns a GroupResource for the given resource name.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

var (
	SchemeBuilder      = runtime.NewSchemeBuilder(addKnownTypes, addDefaultingFuncs, addConversionFuncs)
	localSchemeBuilder = &SchemeBuilder
	// AddToScheme registers the API with a scheme.
	AddToScheme = localSchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	for _, gv := range []schema.GroupVersion{SchemeGroupVersion, InternalGroupVersion} {
		scheme.AddKnownTypes(gv,
			&ClusterGateway{},
			&ClusterGatewayList{},
			&ClusterGatewayProxyOptions{},
			&ClusterGatewayHealth{},
		)
	}
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return scheme.AddFieldLabelConversionFunc(SchemeGroupVersion.WithKind("ClusterGateway"),
		func(label, value string) (string, string, error) {
			switch label {
			case "metadata.name":
				return label, value, nil
			default:
				return "", "", fmt.Errorf("field label %q is not supported for ClusterGateway: only metadata.name is", label)
			}
		})
}

// addConversionFuncs decodes the proxy subresource's query into its options.
// The subpath arrives as the "path" parameter; the rest of the query is the
// inner request's and is forwarded untouched from the original URL.
func addConversionFuncs(scheme *runtime.Scheme) error {
	return scheme.AddConversionFunc((*url.Values)(nil), (*ClusterGatewayProxyOptions)(nil),
		func(a, b interface{}, _ conversion.Scope) error {
			in, out := a.(*url.Values), b.(*ClusterGatewayProxyOptions)
			out.Path = ""
			if v := (*in)["path"]; len(v) > 0 {
				out.Path = v[0]
			}
			return nil
		})
}
