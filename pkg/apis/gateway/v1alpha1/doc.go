// Package v1alpha1 is the gateway.clustergateway.io/v1alpha1 API: the
// cluster-scoped ClusterGateway resource, one per managed cluster.
//
// +k8s:deepcopy-gen=package
// +k8s:openapi-gen=true
// +k8s:openapi-model-package=com.github.clustergateway.cluster-gateway.pkg.apis.gateway.v1alpha1
// +groupName=gateway.clustergateway.io
package v1alpha1
