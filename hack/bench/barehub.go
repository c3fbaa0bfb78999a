package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
)

// The bare reverse proxy behind the hub is the baseline of the hub goal: the
// same hub, aggregation (an APIService of its own group), user and kind of
// RBAC rule, before a proxy with no code of its own but the path cut: what
// any aggregated proxy pays here.
const (
	bareGroup       = "bare.bench.clustergateway.io"
	bareVersion     = "v1alpha1"
	bareService     = "bare-proxy"
	bareAPIPrefix   = "/apis/" + bareGroup + "/" + bareVersion
	bareProxyPrefix = bareAPIPrefix + "/clustergateways/"
	bareRole        = "cluster-gateway-bench:bare-proxy-reader"
)

// bareServiceDNS is the name the hub's aggregator checks in the bare proxy's
// serving certificate.
var bareServiceDNS = bareService + "." + localenv.GatewayNamespace + ".svc"

// bareDiscovery is the bare proxy's answer to the aggregator's
// availability check (GET of its group version).
var bareDiscovery = []byte(`{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"` + bareGroup + "/" + bareVersion + `",` +
	`"resources":[{"name":"clustergateways","singularName":"clustergateway","namespaced":false,"kind":"ClusterGateway","verbs":["get"]},` +
	`{"name":"clustergateways/proxy","singularName":"","namespaced":false,"kind":"ClusterGateway","verbs":["get"]}]}`)

// aggregatedSubpath is the cluster path of an aggregated request to the
// bare proxy: what follows .../clustergateways/NAME/proxy.
func aggregatedSubpath(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, bareProxyPrefix)
	if !ok {
		return "", false
	}
	if _, sub, ok := strings.Cut(rest, "/proxy/"); ok {
		return "/" + sub, true
	}
	return "", false
}

// aggregatedBare serves what the hub's aggregator sends the bare proxy:
// its discovery, and the proxied paths, to proxy; anything else is 404.
func aggregatedBare(proxy http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == bareAPIPrefix:
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(bareDiscovery)
		case strings.HasPrefix(r.URL.Path, bareProxyPrefix):
			proxy.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}

// registerBareBehindHub makes the hub serve bareGroup from the bare proxy at
// proxyURL (an ExternalName Service to localhost, an APIService trusting
// caPEM) with a role like cluster-gateway:proxy-reader, and waits for it.
func registerBareBehindHub(ctx context.Context, env *localenv.Env, proxyURL string, caPEM []byte) error {
	u, err := url.Parse(proxyURL)
	if err != nil {
		return err
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return fmt.Errorf("bare proxy URL %s: %w", proxyURL, err)
	}
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  type: ExternalName
  externalName: localhost
  ports: [{name: https, port: %[3]d}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: %[4]s.%[5]s}
spec:
  group: %[5]s
  version: %[4]s
  service: {name: %[1]s, namespace: %[2]s, port: %[3]d}
  caBundle: %[6]s
  groupPriorityMinimum: 1000
  versionPriority: 15
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: %[7]q}
rules:
- apiGroups: [%[5]s]
  resources: [clustergateways/proxy]
  verbs: [get]
`, bareService, localenv.GatewayNamespace, port, bareVersion, bareGroup, base64.StdEncoding.EncodeToString(caPEM), bareRole)
	path := filepath.Join(env.StateDir, "manifests", "bench-bare-proxy.yaml")
	if err := os.WriteFile(path, []byte(manifest), 0o644); err != nil {
		return err
	}
	if _, err := env.Kubectl(env.Hub.Kubeconfig, "apply", "-f", path); err != nil {
		return err
	}
	hub, err := env.Hub.HTTPClient()
	if err != nil {
		return err
	}
	_, err = poll(ctx, 200*time.Millisecond, time.Minute, "the hub serving "+bareAPIPrefix+" from the bare proxy", func(ctx context.Context) error {
		return again(get(ctx, hub, env.Hub.URL+bareAPIPrefix))
	})
	return err
}
