package e2e

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
)

// TestClientCARotation rotates the client CA and the front-proxy CA of a
// running gateway (both read from files here, as an operator's mounted
// bundles would be): once the gateway has the new bundles, a certificate of
// a removed CA is refused on the next request of a connection that was
// kept alive from before, not only on a new connection. Every part of the
// gateway that verifies client certificates must follow the same bundle at
// the same moment.
func TestClientCARotation(t *testing.T) {
	requireGateway(t)
	dir := t.TempDir()
	oldClient, newClient := testpki.MustCA(t, "rotation-client-old"), testpki.MustCA(t, "rotation-client-new")
	oldFront, newFront := testpki.MustCA(t, "rotation-front-old"), testpki.MustCA(t, "rotation-front-new")
	clientCA, frontCA := filepath.Join(dir, "client-ca.crt"), filepath.Join(dir, "front-proxy-ca.crt")
	// The hub's own CAs stay in both bundles: the hub and the test's admin
	// keep working while the test's CAs come and go.
	write := func(path string, pems ...[]byte) {
		t.Helper()
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, bytes.Join(pems, nil), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil { // as a mounted Secret changes: at once
			t.Fatal(err)
		}
	}
	write(clientCA, env.Hub.CA.CertPEM, oldClient.CertPEM)
	write(frontCA, env.FrontProxyCA.CertPEM, oldFront.CertPEM)
	args := append(append([]string{}, env.GatewayArgs...),
		"--client-ca-file="+clientCA, "--requestheader-client-ca-file="+frontCA,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-")
	restartGateway(t, args)
	t.Cleanup(func() { restartGateway(t, nil) })

	// bob may read clustergateways (localenv binds him to the viewer role).
	user := oldClient.MustIssue(t, testpki.Spec{CommonName: env.Bob.Name, Client: true})
	front := oldFront.MustIssue(t, testpki.Spec{CommonName: "front-proxy-client", Client: true})
	const path = "/apis/gateway.clustergateway.io/v1alpha1/clustergateways"
	type client struct {
		name    string
		c       *http.Client
		headers http.Header
	}
	clientFor := func(name string, p *testpki.Pair, headers http.Header) client {
		return client{name: name, headers: headers, c: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			ForceAttemptHTTP2: true,
			TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: poolOf(env.Gateway.CA.CertPEM),
				Certificates: []tls.Certificate{p.TLS()}},
		}}}
	}
	asFront := http.Header{"X-Remote-User": {env.Bob.Name}}
	get := func(c client) (int, error) {
		req, _ := http.NewRequest(http.MethodGet, env.Gateway.URL+path, nil)
		req.Header = c.headers.Clone()
		resp, err := c.c.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		// A certificate the gateway does not accept leaves the request
		// anonymous, which may not list clustergateways.
		if resp.StatusCode == http.StatusForbidden && bytes.Contains(body, []byte(`User \"system:anonymous\"`)) {
			return http.StatusUnauthorized, nil
		}
		return resp.StatusCode, nil
	}
	kept := []client{clientFor("a user's certificate", user, nil), clientFor("the front proxy's certificate", front, asFront)}
	for _, c := range kept {
		defer c.c.CloseIdleConnections()
		if code, err := get(c); code != http.StatusOK {
			t.Fatalf("%s of the old CA before the rotation: %d %v, want 200", c.name, code, err)
		}
	}

	write(clientCA, env.Hub.CA.CertPEM, newClient.CertPEM)
	write(frontCA, env.FrontProxyCA.CertPEM, newFront.CertPEM)
	for _, c := range kept {
		// A new connection each time tells when the gateway has the new
		// bundle (its file watch, or its poll a minute at the latest)...
		eventually(t, c.name+" of the removed CA refused on a new connection", func() error {
			fresh := clientFor(c.name, map[string]*testpki.Pair{"a user's certificate": user, "the front proxy's certificate": front}[c.name], c.headers)
			defer fresh.c.CloseIdleConnections()
			if code, err := get(fresh); code != http.StatusUnauthorized {
				return fmt.Errorf("%d %v, want 401 (or 403 as system:anonymous)", code, err)
			}
			return nil
		})
		// ...and then the kept-alive connection is refused as well.
		if code, err := get(c); code != http.StatusUnauthorized {
			t.Errorf("%s of the removed CA on a connection kept alive from before the rotation: %d %v, want 401 (or 403 as system:anonymous)", c.name, code, err)
		}
	}
	// The new CAs' certificates are taken.
	for _, c := range []client{
		clientFor("a user's certificate of the new CA", newClient.MustIssue(t, testpki.Spec{CommonName: env.Bob.Name, Client: true}), nil),
		clientFor("the front proxy's certificate of the new CA", newFront.MustIssue(t, testpki.Spec{CommonName: "front-proxy-client", Client: true}), asFront),
	} {
		if code, err := get(c); code != http.StatusOK {
			t.Errorf("%s: %d %v, want 200", c.name, code, err)
		}
		c.c.CloseIdleConnections()
	}
}
