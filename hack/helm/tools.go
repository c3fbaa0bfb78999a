//go:build tools

// Package tools pins helm, which `make helm` builds into _output/bin for
// `make verify` (helm lint, helm template) and the chart tests. It is a
// module of its own so helm's dependencies stay out of the gateway's and the
// kube-apiserver tools module's graphs.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
