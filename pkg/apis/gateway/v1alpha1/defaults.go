package v1alpha1

import "k8s.io/apimachinery/pkg/runtime"

func addDefaultingFuncs(scheme *runtime.Scheme) error {
	scheme.AddTypeDefaultingFunc(&ClusterGateway{}, func(obj interface{}) { SetDefaults_ClusterGateway(obj.(*ClusterGateway)) })
	scheme.AddTypeDefaultingFunc(&ClusterGatewayList{}, func(obj interface{}) {
		list := obj.(*ClusterGatewayList)
		for i := range list.Items {
			SetDefaults_ClusterGateway(&list.Items[i])
		}
	})
	return nil
}

// SetDefaults_ClusterGateway fills the optional enums: Direct endpoints and no impersonation.
func SetDefaults_ClusterGateway(obj *ClusterGateway) {
	if obj.Spec.Endpoint.Type == "" {
		obj.Spec.Endpoint.Type = EndpointDirect
	}
	if obj.Spec.Impersonation.Mode == "" {
		obj.Spec.Impersonation.Mode = ImpersonationNone
	}
}
