package apiserver

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	restclient "k8s.io/client-go/rest"
	"k8s.io/component-base/metrics"

	"github.com/clustergateway/cluster-gateway/pkg/fairness"
	"github.com/clustergateway/cluster-gateway/pkg/health"
	"github.com/clustergateway/cluster-gateway/pkg/pool"
)

// assembledServer is the server New builds, with the generic server's run
// options as the command applies them. The hub's delegated authentication
// and authorization are stand-ins that let an admin through (what they
// decide is not what this package assembles), and the hub is never called:
// nothing is run, the handler is only asked.
func assembledServer(t *testing.T) *Server {
	t.Helper()
	return assembledServerWith(t, nil)
}

// assembledServerWith is assembledServer with tweak applied to the
// configuration before it is completed (nil: none).
func assembledServerWith(t *testing.T, tweak func(*Config)) *Server {
	t.Helper()
	cfg := NewConfig()
	run := genericoptions.NewServerRunOptions()
	if err := run.ComponentGlobalsRegistry.Set(); err != nil {
		t.Fatal(err)
	}
	if err := run.ApplyTo(&cfg.Generic.Config); err != nil {
		t.Fatal(err)
	}
	g := cfg.Generic
	g.ExternalAddress = "127.0.0.1:8443" // not served: nothing listens
	g.ClientConfig = &restclient.Config{Host: "https://127.0.0.1:1"}
	g.LoopbackClientConfig = &restclient.Config{Host: "https://127.0.0.1:8443"}
	g.Authentication.Authenticator = authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
		return &authenticator.Response{User: &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup}}}, true, nil
	})
	g.Authorization.Authorizer = authorizerfactory.NewAlwaysAllowAuthorizer()
	cfg.Extra = ExtraConfig{
		SecretNamespace: "cluster-gateway-system",
		Pool:            *pool.DefaultConfig(),
		Fairness:        *fairness.DefaultConfig(),
		Health:          *health.DefaultConfig(),
		Metrics:         metrics.NewKubeRegistry(),
	}
	if tweak != nil {
		tweak(cfg)
	}
	completed, err := cfg.Complete()
	if err != nil {
		t.Fatal(err)
	}
	s, err := completed.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	return s
}

// The assembled server's handler chain serves the proxy subresource through
// proxy.Route for exactly the methods the REST handler installs it for:
// every verb a managed cluster serves. Route's requests reach the proxy as
// sent, dryRun included; a method installed but not routed would meet the
// REST connect handler, which refuses dryRun, and a method routed but not
// installed would be proxied where the API says it is not served. So
// removing a method from either side, or from both, fails here.
func TestRouteMethodsAreTheREST(t *testing.T) {
	s := assembledServer(t)
	const base = "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/{name}/proxy"
	installed := map[string]bool{}
	for _, ws := range s.Generic.Handler.GoRestfulContainer.RegisteredWebServices() {
		for _, r := range ws.Routes() {
			if r.Path == base || strings.HasPrefix(r.Path, base+"/") {
				installed[r.Method] = true
			}
		}
	}
	var got []string
	for m := range installed {
		got = append(got, m)
	}
	sort.Strings(got)
	// Every verb kubectl and client-go send to a cluster.
	want := []string{"DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"}
	if !slices.Equal(got, want) {
		t.Errorf("the REST handler installs the proxy subresource for %v, want %v", got, want)
	}

	for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE", "PROPFIND"} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(m, "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/absent/proxy/api/v1/namespaces?dryRun=All", nil)
		s.Generic.Handler.ServeHTTP(rec, req)
		body := rec.Body.String()
		// The proxy itself answered: the gateway does not exist (the
		// store is empty), which it says as a NotFound Status.
		proxied := rec.Code == http.StatusNotFound && strings.Contains(body, `clustergateways.gateway.clustergateway.io \"absent\" not found`)
		switch {
		case installed[m] && !proxied:
			t.Errorf("%s: %d %s; the REST installs the subresource for it, so the route must serve it (dryRun to the proxy)", m, rec.Code, body)
		case !installed[m] && proxied:
			t.Errorf("%s: the route served it, but the REST does not install the subresource for it", m)
		case !installed[m] && rec.Code < 400:
			t.Errorf("%s: %d %s; want it refused", m, rec.Code, body)
		}
	}
}
