//go:build tools

// Package tools pins the upstream binaries that `make tools` builds into
// _output/bin, so `go mod tidy` keeps them in this module.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/code-generator/cmd/client-gen"
	_ "k8s.io/code-generator/cmd/deepcopy-gen"
	_ "k8s.io/code-generator/cmd/informer-gen"
	_ "k8s.io/code-generator/cmd/lister-gen"
	_ "k8s.io/kube-openapi/cmd/openapi-gen"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
