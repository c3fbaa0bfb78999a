// Command kube-apiserver is the upstream Kubernetes API server, built from the
// pinned k8s.io/kubernetes module so the local environment and the end-to-end
// tests run against a real hub and real managed clusters.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
