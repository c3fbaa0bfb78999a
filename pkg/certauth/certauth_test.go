package certauth

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
)

// fakeCA is a CA provider whose pool can be replaced, as the dynamic
// providers replace theirs when the bundle changes.
type fakeCA struct{ pool atomic.Pointer[x509.CertPool] }

func (f *fakeCA) Name() string                             { return "fake" }
func (f *fakeCA) CurrentCABundleContent() []byte           { return nil }
func (f *fakeCA) AddListener(dynamiccertificates.Listener) {}
func (f *fakeCA) VerifyOptions() (x509.VerifyOptions, bool) {
	return x509.VerifyOptions{Roots: f.pool.Load(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, true
}

func request(p *testpki.Pair) *http.Request {
	req, _ := http.NewRequest(http.MethodGet, "https://gateway/", nil)
	req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{p.Cert}}
	return req
}

// clientCertAuth is the ClientCert authenticator of a new cache of size,
// over a provider that trusts ca until its pool is replaced.
func clientCertAuth(t *testing.T, ca *testpki.CA, size int) (*fakeCA, *Cache, authenticator.Request) {
	t.Helper()
	provider := &fakeCA{}
	provider.pool.Store(ca.Pool())
	c, err := NewCache(size)
	if err != nil {
		t.Fatal(err)
	}
	return provider, c, c.ClientCert(provider)
}

func TestClientCertVerifiedOnce(t *testing.T) {
	ca := testpki.MustCA(t, "certauth-ca")
	alice := ca.MustIssue(t, testpki.Spec{CommonName: "alice", Organization: []string{"dev"}, Client: true})
	provider, c, auth := clientCertAuth(t, ca, 4)
	var first *authenticator.Response
	for range 100 {
		resp, ok, err := auth.AuthenticateRequest(request(alice))
		if err != nil || !ok || resp.User.GetName() != "alice" || !slices.Equal(resp.User.GetGroups(), []string{"dev", user.AllAuthenticated}) {
			t.Fatalf("alice: %v %v %v", resp, ok, err)
		}
		if first == nil {
			first = resp
		} else if resp != first {
			t.Fatal("the user was worked out again for a chain already verified")
		}
	}
	// Whoever appends to the shared user's groups gets a copy.
	if g := first.User.GetGroups(); cap(g) != len(g) {
		t.Fatalf("the shared groups have spare capacity (%d of %d): concurrent appends would write into them", cap(g)-len(g), cap(g))
	}
	if _, _, n, _ := c.Stats(); n != 1 {
		t.Fatalf("100 requests with one certificate verified %d chains, want 1", n)
	}

	// The CA rotated out of the bundle: the provider hands out a new pool,
	// and the next request (even on the same connection) is verified again.
	other := testpki.MustCA(t, "certauth-other")
	provider.pool.Store(other.Pool())
	if _, ok, err := auth.AuthenticateRequest(request(alice)); ok || err == nil || !strings.Contains(err.Error(), "alice") {
		t.Fatalf("after the CA left the bundle: ok=%v err=%v, want refused naming the certificate", ok, err)
	}
	// Back in the bundle: verified again, not served from the old entry.
	provider.pool.Store(ca.Pool())
	if _, ok, err := auth.AuthenticateRequest(request(alice)); !ok || err != nil {
		t.Fatalf("CA back: %v %v", ok, err)
	}
	if _, _, n, _ := c.Stats(); n != 3 {
		t.Fatalf("verifications %d, want 3 (once per pool)", n)
	}

	// An expired certificate is refused even though its chain is cached.
	c.now = func() time.Time { return alice.Cert.NotAfter.Add(time.Minute) }
	if _, ok, err := auth.AuthenticateRequest(request(alice)); ok || err == nil {
		t.Fatalf("an expired certificate: ok=%v err=%v, want refused", ok, err)
	}
}

type names []string

func (n names) Value() []string { return n }

func TestRequestHeader(t *testing.T) {
	proxyCA := testpki.MustCA(t, "certauth-front-proxy")
	front := proxyCA.MustIssue(t, testpki.Spec{CommonName: "front-proxy-client", Client: true})
	stranger := proxyCA.MustIssue(t, testpki.Spec{CommonName: "someone-else", Client: true})
	provider := &fakeCA{}
	provider.pool.Store(proxyCA.Pool())
	c, _ := NewCache(4)
	auth := c.RequestHeader(RequestHeaderConfig{
		CAContentProvider: provider, AllowedClientNames: names{"front-proxy-client"},
		UsernameHeaders: names{"X-Remote-User"}, UIDHeaders: names{}, GroupHeaders: names{"X-Remote-Group"}, ExtraHeaderPrefixes: names{"X-Remote-Extra-"},
	})
	req := request(front)
	req.Header.Set("X-Remote-User", "bob")
	req.Header.Add("X-Remote-Group", "ops")
	resp, ok, err := auth.AuthenticateRequest(req)
	if err != nil || !ok || resp.User.GetName() != "bob" || resp.User.GetGroups()[0] != "ops" {
		t.Fatalf("front proxy for bob: %v %v %v", resp, ok, err)
	}
	req = request(stranger)
	req.Header.Set("X-Remote-User", "root")
	if _, ok, err := auth.AuthenticateRequest(req); ok || err == nil || !strings.Contains(err.Error(), "someone-else") {
		t.Fatalf("a certificate of the right CA but not an allowed name: ok=%v err=%v", ok, err)
	}
	user := testpki.MustCA(t, "certauth-users").MustIssue(t, testpki.Spec{CommonName: "mallory", Client: true})
	req = request(user)
	req.Header.Set("X-Remote-User", "root")
	_, _, before, sizeBefore := c.Stats()
	for range 3 {
		req = request(user)
		req.Header.Set("X-Remote-User", "root")
		if _, ok, err := auth.AuthenticateRequest(req); ok || err == nil {
			t.Fatalf("a certificate of another CA passed as the front proxy: ok=%v err=%v", ok, err)
		}
	}
	// A refusal is worked out again each time and never kept: what it would
	// keep is whatever a client without a credential sent.
	if _, _, after, size := c.Stats(); after-before != 3 || size != sizeBefore {
		t.Errorf("three requests with a certificate of another CA: %d verifications, cache %d -> %d entries; want 3, and no entry kept", after-before, sizeBefore, size)
	}
}

// A cached chain ends at the earliest notAfter of every certificate in it,
// the intermediates' included, not at the leaf's: once an intermediate has
// expired, a chain verified before is refused.
func TestCachedChainEndsAtEarliestNotAfter(t *testing.T) {
	ca := testpki.MustCA(t, "certauth-expiry-ca")
	now := time.Now()
	interPair := ca.MustIssue(t, testpki.Spec{CommonName: "certauth-expiry-intermediate", IsCA: true, NotAfter: now.Add(time.Hour)})
	inter := &testpki.CA{Cert: interPair.Cert, Key: interPair.Key, CertPEM: interPair.CertPEM, KeyPEM: interPair.KeyPEM}
	leaf := inter.MustIssue(t, testpki.Spec{CommonName: "carol", Client: true, NotAfter: now.Add(24 * time.Hour)})
	_, c, auth := clientCertAuth(t, ca, 4)
	c.now = func() time.Time { return now }
	conn := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf.Cert, inter.Cert}}
	req := func(state *tls.ConnectionState) *http.Request {
		r, _ := http.NewRequest(http.MethodGet, "https://gateway/", nil)
		r.TLS = state
		return r
	}
	for range 2 { // verified, then found in the cache
		if resp, ok, err := auth.AuthenticateRequest(req(conn)); !ok || err != nil || resp.User.GetName() != "carol" {
			t.Fatalf("before the intermediate expires: %v %v %v", resp, ok, err)
		}
	}
	if _, _, n, _ := c.Stats(); n != 1 {
		t.Fatalf("verifications %d, want 1", n)
	}
	// After the intermediate's notAfter, before the leaf's.
	c.now = func() time.Time { return now.Add(2 * time.Hour) }
	other := &tls.ConnectionState{PeerCertificates: conn.PeerCertificates}
	for name, state := range map[string]*tls.ConnectionState{"same connection": conn, "another connection": other} {
		if _, ok, err := auth.AuthenticateRequest(req(state)); ok || err == nil {
			t.Fatalf("%s, the intermediate expired: ok=%v err=%v, want refused", name, ok, err)
		}
	}
	if _, _, n, _ := c.Stats(); n != 3 {
		t.Fatalf("verifications %d, want 3: both requests after the intermediate expired verify again", n)
	}
}
