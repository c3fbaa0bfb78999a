//go:build tools

// Package clustergateway pins the libraries the gateway is built on until the
// code that imports them lands, so `go mod tidy` keeps them.
package clustergateway

import (
	_ "github.com/hashicorp/golang-lru/v2"
	_ "go.uber.org/goleak"
	_ "google.golang.org/grpc"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/apimachinery/pkg/util/proxy"
	_ "k8s.io/apiserver/pkg/server"
	_ "k8s.io/apiserver/pkg/server/options"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/component-base/metrics/legacyregistry"
	_ "k8s.io/cri-streaming/pkg/streaming/remotecommand"
	_ "k8s.io/kube-openapi/pkg/common"
	_ "sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client"
)
