package e2e

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestProxyAuthorizeSubpath runs the gateway with --authorize-proxy-subpath:
// a hub user allowed to use the proxy still needs the hub's permission for
// the inner request (verb, resource, namespace, name or non-resource path).
// Every refusal is a 403 from the gateway naming the inner verb and
// resource; exec, attach and port-forward need create on the inner
// subresource over WebSocket (a GET) too. It restarts the gateway, so it
// does not run in parallel.
func TestProxyAuthorizeSubpath(t *testing.T) {
	requireGateway(t)
	restartGateway(t, append(append([]string{}, env.GatewayArgs...), "--authorize-proxy-subpath"))
	t.Cleanup(func() { restartGateway(t, nil) })

	bob := env.Bob
	bind(t, "clusterrolebinding", uniqueName(t, "bob-proxy"), "--clusterrole=cluster-gateway:proxy", "--user="+bob.Name)
	cert, err := tls.X509KeyPair(bob.Cert.CertPEM, bob.Cert.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	gw := env.Managed[0].GatewayName
	hub := hostOf(env.Hub.URL)
	do := func(method, sub string, headers ...string) rawResponse {
		t.Helper()
		h := append([]string{"Host: " + hub}, headers...)
		if !strings.Contains(strings.Join(headers, "\n"), "Upgrade") {
			h = append(h, "Connection: close")
		}
		return rawRequest(t, hub, env.Hub.CA.CertPEM, &cert, fmt.Sprintf("%s %s HTTP/1.1\r\n%s\r\n\r\n", method, proxyPath(gw, sub), strings.Join(h, "\r\n")))
	}
	refused := func(r rawResponse, what string) error {
		if r.Code != http.StatusForbidden || !strings.Contains(r.Body, `"reason":"Forbidden"`) ||
			!strings.Contains(r.Body, fmt.Sprintf(`the hub does not allow \"%s\" to %s through the gateway`, bob.Name, what)) {
			return fmt.Errorf("got %d %s; want 403 saying the hub does not allow %s to %s", r.Code, r.Body, bob.Name, what)
		}
		return nil
	}
	websocket := []string{"Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Protocol: v5.channel.k8s.io"}
	spdy := []string{"Connection: Upgrade", "Upgrade: SPDY/3.1", "X-Stream-Protocol-Version: v4.channel.k8s.io"}

	// Allowed to use the proxy, but not to list namespaces on the hub.
	eventually(t, "bob's inner list to be refused by the gateway", func() error {
		return refused(do("GET", "/api/v1/namespaces"), "list namespaces")
	})
	// A non-resource path is authorized as such: every user may read /version
	// on the hub (system:public-info-viewer), nobody but admins /metrics.
	if r := do("GET", "/version"); r.Code != http.StatusOK {
		t.Fatalf("bob may get /version on the hub, but not through the gateway: %d %s", r.Code, r.Body)
	}
	if err := refused(do("GET", "/metrics"), "/metrics"); err != nil {
		t.Fatal(err)
	}
	if err := refused(do("GET", "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1"), "watch configmaps in namespace default"); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"exec", "attach", "portforward"} {
		path := "/api/v1/namespaces/default/pods/demo/" + sub + "?stdout=true&command=id&ports=80"
		// Without even get: refused as get over WebSocket, as create over SPDY.
		if err := refused(do("GET", path, websocket...), "get pods/"+sub+" in namespace default"); err != nil {
			t.Errorf("%s over WebSocket: %v", sub, err)
		}
		if err := refused(do("POST", path, spdy...), "create pods/"+sub+" in namespace default"); err != nil {
			t.Errorf("%s over SPDY: %v", sub, err)
		}
	}

	// With get but not create on the inner subresources, WebSocket upgrades
	// (GET) are still refused: they need create, as on the cluster itself.
	role := uniqueName(t, "inner")
	bind(t, "clusterrole", role, "--verb=get,list,watch", "--resource=namespaces,configmaps,pods,pods/exec,pods/attach,pods/portforward")
	bind(t, "clusterrolebinding", role, "--clusterrole="+role, "--user="+bob.Name)
	eventually(t, "bob's inner list to be allowed", func() error {
		if r := do("GET", "/api/v1/namespaces"); r.Code != http.StatusOK || !strings.Contains(r.Body, `"NamespaceList"`) {
			return fmt.Errorf("%d %.300s", r.Code, r.Body)
		}
		return nil
	})
	// The gateway's delegated authorizer caches the earlier refusal of this
	// watch for its deny TTL (10 s), which may outlast the list's.
	eventually(t, "a watch bob may make on the hub to be allowed", func() error {
		if r := do("GET", "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1"); r.Code != http.StatusOK {
			return fmt.Errorf("%d %.300s", r.Code, r.Body)
		}
		return nil
	})
	// ...but only that: reading Secrets in the managed cluster is still refused.
	if err := refused(do("GET", "/api/v1/namespaces/kube-system/secrets"), "list secrets in namespace kube-system"); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"exec", "attach", "portforward"} {
		path := "/api/v1/namespaces/default/pods/demo/" + sub + "?stdout=true&command=id&ports=80"
		if err := refused(do("GET", path, websocket...), "create pods/"+sub+" in namespace default"); err != nil {
			t.Errorf("%s over WebSocket with get only: %v", sub, err)
		}
	}

	// With create, exec runs: the real kubectl, over WebSocket, to the real cluster.
	bind(t, "clusterrole", role+"-create", "--verb=create", "--resource=pods/exec,pods/attach,pods/portforward")
	bind(t, "clusterrolebinding", role+"-create", "--clusterrole="+role+"-create", "--user="+bob.Name)
	kc := proxyKubeconfig(t, bob, gw)
	eventually(t, "bob's exec to be allowed", func() error {
		r := kubectl(t, kc, streamProtocols[0].Env, "", "exec", "demo", "--", "hostname")
		if r.Err != nil || strings.TrimSpace(r.Stdout) != env.Managed[0].Name {
			return fmt.Errorf("err=%v stdout=%q stderr=%s", r.Err, r.Stdout, r.Stderr)
		}
		return nil
	})
}
