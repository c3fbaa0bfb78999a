package certauth

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
)

// decision is what an authenticator said, in the terms that matter.
type decision struct {
	OK     bool
	Err    bool
	User   string
	Groups []string
	UID    string
	Extra  map[string][]string
}

func decide(a authenticator.Request, req *http.Request) decision {
	resp, ok, err := a.AuthenticateRequest(req)
	d := decision{OK: ok, Err: err != nil}
	if ok {
		d.User, d.Groups, d.UID, d.Extra = resp.User.GetName(), resp.User.GetGroups(), resp.User.GetUID(), resp.User.GetExtra()
	}
	return d
}

// certs is a set of chains a client may present, good and bad.
func certs(t *testing.T, ca *testpki.CA) map[string][]*x509.Certificate {
	t.Helper()
	now := time.Now()
	interPair := ca.MustIssue(t, testpki.Spec{CommonName: "certauth-intermediate", IsCA: true})
	inter := &testpki.CA{Cert: interPair.Cert, Key: interPair.Key, CertPEM: interPair.CertPEM, KeyPEM: interPair.KeyPEM}
	viaInter := inter.MustIssue(t, testpki.Spec{CommonName: "carol", Organization: []string{"ops"}, Client: true})
	leaf := func(s testpki.Spec) []*x509.Certificate { return []*x509.Certificate{ca.MustIssue(t, s).Cert} }
	return map[string][]*x509.Certificate{
		"good":                   leaf(testpki.Spec{CommonName: "front-proxy-client", Organization: []string{"dev", "qa"}, Client: true}),
		"name not allowed":       leaf(testpki.Spec{CommonName: "alice", Client: true}),
		"expired":                leaf(testpki.Spec{CommonName: "front-proxy-client", Client: true, NotBefore: now.Add(-2 * time.Hour), NotAfter: now.Add(-time.Hour)}),
		"not yet valid":          leaf(testpki.Spec{CommonName: "front-proxy-client", Client: true, NotBefore: now.Add(time.Hour), NotAfter: now.Add(2 * time.Hour)}),
		"server usage only":      leaf(testpki.Spec{CommonName: "front-proxy-client", Server: true}),
		"no common name":         leaf(testpki.Spec{Client: true}),
		"anonymous":              leaf(testpki.Spec{CommonName: "system:anonymous", Organization: []string{"dev"}, Client: true}),
		"authenticated already":  leaf(testpki.Spec{CommonName: "dave", Organization: []string{"system:authenticated", "dev"}, Client: true}),
		"unauthenticated group":  leaf(testpki.Spec{CommonName: "erin", Organization: []string{"system:unauthenticated"}, Client: true}),
		"other CA":               {testpki.MustCA(t, "certauth-stranger").MustIssue(t, testpki.Spec{CommonName: "front-proxy-client", Client: true}).Cert},
		"intermediate presented": {viaInter.Cert, inter.Cert},
		"intermediate missing":   {viaInter.Cert},
	}
}

func tlsRequest(chain []*x509.Certificate) *http.Request {
	return connRequest(&tls.ConnectionState{PeerCertificates: chain})
}

// connRequest is a request on the connection whose TLS state is state: a
// server gives every request of a connection the same state.
func connRequest(state *tls.ConnectionState) *http.Request {
	req, _ := http.NewRequest(http.MethodGet, "https://gateway/", nil)
	req.TLS = state
	req.Header.Set("X-Remote-User", "bob")
	req.Header.Add("X-Remote-Group", "team")
	req.Header.Set("X-Remote-Extra-Scopes", "read")
	return req
}

// No cache may let a request through that the uncached path would refuse:
// for every kind of chain, asked three times on one connection (a miss, then
// hits in the cache) and once on another (a hit too), the cached
// authenticators decide exactly as the generic server's own do.
func TestSameDecisionsAsUncached(t *testing.T) {
	ca := testpki.MustCA(t, "certauth-equivalence")
	provider := &fakeCA{}
	provider.pool.Store(ca.Pool())
	verify := func() (x509.VerifyOptions, bool) { return provider.VerifyOptions() }
	allowed := names{"front-proxy-client", "carol"}
	headers := []headerrequest.StringSliceProvider{names{"X-Remote-User"}, names{}, names{"X-Remote-Group"}, names{"X-Remote-Extra-"}}

	c, err := NewCache(64)
	if err != nil {
		t.Fatal(err)
	}
	pairs := map[string][2]authenticator.Request{
		// As the gateway's chain has them: the group adder after both.
		"client certificate": {
			group.NewAuthenticatedGroupAdder(x509request.NewDynamic(verify, x509request.CommonNameUserConversion)),
			group.NewAuthenticatedGroupAdder(c.ClientCert(provider)),
		},
		"request header": {
			headerrequest.NewDynamicVerifyOptionsSecure(verify, allowed, headers[0], headers[1], headers[2], headers[3]),
			c.RequestHeader(RequestHeaderConfig{CAContentProvider: provider, AllowedClientNames: allowed,
				UsernameHeaders: headers[0], UIDHeaders: headers[1], GroupHeaders: headers[2], ExtraHeaderPrefixes: headers[3]}),
		},
	}
	for kind, pair := range pairs {
		for name, chain := range certs(t, ca) {
			want := decide(pair[0], tlsRequest(chain))
			conn := &tls.ConnectionState{PeerCertificates: chain}
			for i := range 4 {
				req := connRequest(conn)
				if i == 3 {
					req = tlsRequest(chain) // another connection
				}
				if got := decide(pair[1], req); !reflect.DeepEqual(got, want) {
					t.Errorf("%s, %s, request %d: cached %+v, uncached %+v", kind, name, i+1, got, want)
				}
				if kind == "request header" && want.OK && req.Header.Get("X-Remote-User") != "" {
					t.Errorf("%s, %s: the identity headers were left on the request", kind, name)
				}
			}
		}
	}
	if _, _, verifications, _ := c.Stats(); verifications == 0 {
		t.Fatal("nothing was verified")
	}
	if hits, _, _, _ := c.Stats(); hits == 0 {
		t.Fatal("no request was answered from the cache")
	}
}

// The real file-backed CA provider (--client-ca-file, and the request-header
// CA read from the hub's ConfigMap works alike): when the bundle on disk no
// longer holds the CA, the next request on a connection already verified is
// refused; when it does again, the request passes, verified anew.
func TestRotatedBundleOnAReusedConnection(t *testing.T) {
	ca := testpki.MustCA(t, "certauth-rotation")
	other := testpki.MustCA(t, "certauth-rotation-other")
	alice := ca.MustIssue(t, testpki.Spec{CommonName: "alice", Client: true})
	file := filepath.Join(t.TempDir(), "client-ca.crt")
	write := func(pem []byte) {
		t.Helper()
		if err := os.WriteFile(file, pem, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(ca.CertPEM)
	provider, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca", file)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCache(8)
	if err != nil {
		t.Fatal(err)
	}
	auth := c.ClientCert(provider)

	// One TLS connection, as a client keeping it alive would use it.
	conn := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{alice.Cert}}
	check := func(step string, wantOK bool) {
		t.Helper()
		resp, ok, err := auth.AuthenticateRequest(connRequest(conn))
		if ok != wantOK || (ok && resp.User.GetName() != "alice") || (!ok && err == nil) {
			t.Fatalf("%s: ok=%v err=%v, want ok=%v", step, ok, err, wantOK)
		}
	}
	check("first request", true)
	check("same connection", true)
	if _, _, n, _ := c.Stats(); n != 1 {
		t.Fatalf("two requests verified %d chains, want 1", n)
	}
	write(other.CertPEM)
	if err := provider.RunOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	check("after the CA left the bundle", false)
	write(append(append([]byte{}, other.CertPEM...), ca.CertPEM...))
	if err := provider.RunOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	check("after the CA came back", true)
	if _, _, n, _ := c.Stats(); n != 3 {
		t.Fatalf("verified %d times, want 3: once per bundle", n)
	}
}

// Many distinct certificates: the cache holds at most its size and every
// one is still authenticated correctly.
func TestBoundedUnderManyCertificates(t *testing.T) {
	ca := testpki.MustCA(t, "certauth-many")
	_, c, auth := clientCertAuth(t, ca, 16)
	for i := range 200 {
		name := fmt.Sprintf("user-%d", i)
		p := ca.MustIssue(t, testpki.Spec{CommonName: name, Client: true})
		if resp, ok, err := auth.AuthenticateRequest(tlsRequest([]*x509.Certificate{p.Cert})); !ok || err != nil || resp.User.GetName() != name {
			t.Fatalf("%s: %v %v", name, ok, err)
		}
		if _, _, _, size := c.Stats(); size > 16 {
			t.Fatalf("after %d certificates the cache holds %d, bound 16", i+1, size)
		}
	}
}
