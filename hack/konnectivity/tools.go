//go:build tools

// Package tools pins the konnectivity proxy-server and proxy-agent that the
// end-to-end tests run. v0.34.0 is the newest server module the module proxy
// serves here; the gateway's client library (v0.37.1) talks to it fine.
package tools

import (
	_ "sigs.k8s.io/apiserver-network-proxy/cmd/agent"
	_ "sigs.k8s.io/apiserver-network-proxy/cmd/server"
)
