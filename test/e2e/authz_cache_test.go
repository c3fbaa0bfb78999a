package e2e

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// The gateway keeps authorization decisions for their TTL (the generic
// webhook authorizer's cache; here the defaults, 10 s) per caller and request attributes, and they
// follow the hub's RBAC: a grant takes effect once the earlier refusal has
// expired, a revocation once the permission has, and no caller is answered
// from another's decision, nor a request for one cluster from another's.
// The requests go to the gateway's own port: through the hub, the hub's
// RBAC would refuse a revoked caller before the gateway saw the request.
func TestAuthorizationFollowsHubRBAC(t *testing.T) {
	requireGateway(t)
	t.Parallel()
	user, other := newHubUser(t, "authz"), newHubUser(t, "authz-other")
	certOf := func(u string, certPEM, keyPEM []byte) *tls.Certificate {
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		return &c
	}
	userCert, otherCert := certOf(user.Name, user.Cert.CertPEM, user.Cert.KeyPEM), certOf(other.Name, other.Cert.CertPEM, other.Cert.KeyPEM)
	allowedGW, otherGW := env.Managed[0].GatewayName, env.Managed[1].GatewayName
	get := func(cert *tls.Certificate, gateway string) rawResponse {
		t.Helper()
		return rawRequest(t, hostOf(env.Gateway.URL), env.Gateway.CA.CertPEM, cert,
			fmt.Sprintf("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", proxyPath(gateway, "/api/v1/namespaces/default")))
	}
	want := func(r rawResponse, code int) error {
		if r.Code != code {
			return fmt.Errorf("%d %.300s, want %d", r.Code, r.Body, code)
		}
		return nil
	}

	if err := want(get(userCert, allowedGW), http.StatusForbidden); err != nil {
		t.Fatalf("before any binding: %v", err)
	}
	// A binding to one gateway's proxy (by name), then revoked.
	role, binding := uniqueName(t, "authz-role"), uniqueName(t, "authz-binding")
	bind(t, "clusterrole", role, "--verb=get", "--resource=clustergateways.gateway.clustergateway.io/proxy", "--resource-name="+allowedGW)
	bind(t, "clusterrolebinding", binding, "--clusterrole="+role, "--user="+user.Name)
	eventually(t, "the grant to take effect after the refusal's TTL", func() error {
		return want(get(userCert, allowedGW), http.StatusOK)
	})
	for _, c := range []struct {
		what    string
		cert    *tls.Certificate
		gateway string
	}{
		{"another caller, same cluster", otherCert, allowedGW},
		{"the same caller, another cluster", userCert, otherGW},
	} {
		if err := want(get(c.cert, c.gateway), http.StatusForbidden); err != nil {
			t.Errorf("%s, while the caller's decision is cached: %v", c.what, err)
		}
	}
	// A revocation takes effect within the allow TTL (the gateway's
	// --authorization-webhook-cache-authorized-ttl, 10s by default) and a
	// small bound for the hub's RBAC to follow the deletion, not whenever a
	// decision happens to be dropped.
	const allowTTL, bound = 10 * time.Second, 5 * time.Second
	mustKubectl(t, env.Hub.Kubeconfig, "delete", "clusterrolebinding", binding)
	revoked := time.Now()
	for {
		err := want(get(userCert, allowedGW), http.StatusForbidden)
		if err == nil {
			break
		}
		if since := time.Since(revoked); since > allowTTL+bound {
			t.Fatalf("the revocation had not taken effect %v after it, beyond the %v allow TTL and a %v bound: %v", since.Round(time.Millisecond), allowTTL, bound, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
