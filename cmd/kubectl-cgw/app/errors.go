package app

import (
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// hubError says what a failed hub request means and what to do about it.
func hubError(what string, err error) error {
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("the hub refused to %s: %v\n(ask a hub administrator for that permission on clustergateways; docs/api.md#rbac lists the roles)", what, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("the hub did not accept your credentials to %s: %v (check --kubeconfig and --context)", what, err)
	case isResourceMissing(err):
		return fmt.Errorf("the hub does not serve ClusterGateways (%v): is cluster-gateway installed? `kubectl get apiservice v1alpha1.gateway.clustergateway.io` shows its state", err)
	case apierrors.IsServiceUnavailable(err):
		return fmt.Errorf("the hub cannot reach the gateway to %s: %v (see docs/troubleshooting.md; `kubectl get apiservice v1alpha1.gateway.clustergateway.io` shows why)", what, err)
	}
	return fmt.Errorf("%s on the hub: %w", what, err)
}

// isResourceMissing is a 404 for the resource type itself (no APIService),
// rather than for one named object.
func isResourceMissing(err error) bool {
	var status apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d == nil || d.Name == ""
}
