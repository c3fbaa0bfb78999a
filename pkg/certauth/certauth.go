// Package certauth authenticates requests by client certificate, as the
// generic API server's delegated authenticators do (the hub's front-proxy
// certificate with request headers, and users' own certificates), but
// verifies each certificate chain once rather than on every request: a TLS
// connection carries the same peer certificates for its whole life, and
// chain verification was the largest share of the gateway's CPU per request.
//
// A verified chain is kept in a bounded LRU keyed by the leaf and
// intermediate certificates and by the CA pool it was verified against. The
// pool is compared by identity: the dynamic CA providers hand out a new pool
// when the CA bundle changes, so a rotated bundle is used on the very next
// request, and a connection reused across the change is verified again. An
// entry ends at the earliest notAfter of its chain. A refusal is never kept:
// it would keep what a client without any credential sent.
package certauth

import (
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/component-base/metrics"

	"github.com/clustergateway/cluster-gateway/internal/scraped"
)

// Cache holds verified chains.
type Cache struct {
	lru                         *lru.Cache[key, *verified]
	now                         func() time.Time
	hits, misses, verifications atomic.Int64
}

type key struct {
	certs [sha256.Size]byte // leaf and intermediates, as presented, and the key usages
	roots *x509.CertPool    // by identity; held here, so its address cannot be reused while cached
}

type verified struct {
	chains   [][]*x509.Certificate
	notAfter time.Time
	user     atomic.Pointer[certUser] // ClientCert's user for these chains, once worked out
}

// certUser is what ClientCert answers for a verified chain.
type certUser struct {
	resp *authenticator.Response
	ok   bool
	err  error
}

// NewCache returns a cache of at most size chains.
func NewCache(size int) (*Cache, error) {
	l, err := lru.New[key, *verified](size)
	if err != nil {
		return nil, fmt.Errorf("certificate cache: %w", err)
	}
	return &Cache{lru: l, now: time.Now}, nil
}

// Stats are the cache's counters: lookups that hit, lookups that missed,
// and chain verifications done (misses that were verified).
func (c *Cache) Stats() (hits, misses, verifications int64, size int) {
	return c.hits.Load(), c.misses.Load(), c.verifications.Load(), c.lru.Len()
}

// lookup returns the cache entry of peer's chains under opts, verifying and
// adding them when they are not there. The entry is nil when the answer is
// not kept (an error other than an unknown authority).
func (c *Cache) lookup(peer []*x509.Certificate, opts x509.VerifyOptions) (*verified, error) {
	h := sha256.New()
	for _, cert := range peer {
		h.Write(cert.Raw)
	}
	// The usages asked for are part of what was verified.
	for _, u := range opts.KeyUsages {
		h.Write([]byte{0, byte(u)})
	}
	k := key{roots: opts.Roots}
	h.Sum(k.certs[:0])
	now := c.now()
	if v, ok := c.lru.Get(k); ok && now.Before(v.notAfter) {
		c.hits.Add(1)
		return v, nil
	}
	c.misses.Add(1)
	if opts.Intermediates == nil && len(peer) > 1 {
		opts.Intermediates = x509.NewCertPool()
		for _, intermediate := range peer[1:] {
			opts.Intermediates.AddCert(intermediate)
		}
	}
	opts.CurrentTime = now
	c.verifications.Add(1)
	chains, err := peer[0].Verify(opts)
	if err != nil {
		// A refusal is never kept: what it would keep (the refused chain,
		// in the error) is whatever a client with no credential at all
		// sent, up to 256 KiB a connection, and keeping it would push out
		// the chains of those who have one.
		return nil, err
	}
	notAfter := peer[0].NotAfter
	for _, chain := range chains {
		for _, cert := range chain {
			if cert.NotAfter.Before(notAfter) {
				notAfter = cert.NotAfter
			}
		}
	}
	v := &verified{chains: chains, notAfter: notAfter}
	c.lru.Add(k, v)
	return v, nil
}

// ClientCert authenticates a user by client certificate, as
// x509.NewDynamic with CommonNameUserConversion, followed by
// group.AuthenticatedGroupAdder, does. The user is worked out once per
// verified chain and shared by its requests, as the generic server's token
// cache shares its answers: every request used to hash the certificate for
// the credential ID and build the user twice over (a dozen allocations).
func (c *Cache) ClientCert(ca dynamiccertificates.CAContentProvider) authenticator.Request {
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		if req.TLS == nil || len(req.TLS.PeerCertificates) == 0 {
			return nil, false, nil
		}
		opts, ok := ca.VerifyOptions()
		if !ok {
			return nil, false, nil
		}
		v, err := c.lookup(req.TLS.PeerCertificates, opts)
		if err != nil {
			return nil, false, fmt.Errorf("verifying certificate with subject %q failed: %w", req.TLS.PeerCertificates[0].Subject, err)
		}
		u := v.user.Load()
		if u == nil {
			// Concurrent first requests may each work it out: the same answer.
			u = userOf(v.chains)
			v.user.Store(u)
		}
		return u.resp, u.ok, u.err
	})
}

// userOf is x509.NewDynamic's answer for verified chains with
// CommonNameUserConversion, with system:authenticated added as
// group.AuthenticatedGroupAdder adds it (which then, still in the chain,
// leaves the user as it is).
func userOf(chains [][]*x509.Certificate) *certUser {
	var lastErr error
	for _, chain := range chains {
		resp, ok, err := x509request.CommonNameUserConversion.User(chain)
		if err != nil {
			lastErr = err
			continue
		}
		if ok {
			return &certUser{resp: withAuthenticatedGroup(resp), ok: true}
		}
	}
	return &certUser{err: lastErr}
}

// withAuthenticatedGroup is what group.AuthenticatedGroupAdder does to a
// response. The groups have no spare capacity, so that whoever appends to
// the shared user's groups gets a copy rather than writing into them.
func withAuthenticatedGroup(r *authenticator.Response) *authenticator.Response {
	u := r.User
	if u.GetName() == user.Anonymous {
		return r
	}
	for _, g := range u.GetGroups() {
		if g == user.AllAuthenticated || g == user.AllUnauthenticated {
			return r
		}
	}
	groups := make([]string, 0, len(u.GetGroups())+1)
	groups = append(append(groups, u.GetGroups()...), user.AllAuthenticated)
	ret := *r
	ret.User = &user.DefaultInfo{Name: u.GetName(), UID: u.GetUID(), Groups: groups, Extra: u.GetExtra()}
	return &ret
}

// RequestHeader authenticates a request a front proxy (the hub's
// aggregator) makes on a user's behalf: its certificate must chain to the
// request-header CA and have an allowed common name; the user is then read
// from the headers, as headerrequest.NewDynamicVerifyOptionsSecure does.
func (c *Cache) RequestHeader(rh RequestHeaderConfig) authenticator.Request {
	headers := headerrequest.NewDynamic(rh.UsernameHeaders, rh.UIDHeaders, rh.GroupHeaders, rh.ExtraHeaderPrefixes)
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		if req.TLS == nil || len(req.TLS.PeerCertificates) == 0 {
			return nil, false, nil
		}
		opts, ok := rh.CAContentProvider.VerifyOptions()
		if !ok {
			return nil, false, nil
		}
		if _, err := c.lookup(req.TLS.PeerCertificates, opts); err != nil {
			return nil, false, err
		}
		if err := allowed(req.TLS.PeerCertificates[0].Subject, rh.AllowedClientNames.Value()); err != nil {
			return nil, false, err
		}
		return headers.AuthenticateRequest(req)
	})
}

// RequestHeaderConfig is what RequestHeader needs of the generic server's
// request-header configuration (authenticatorfactory.RequestHeaderConfig).
type RequestHeaderConfig struct {
	CAContentProvider                                              dynamiccertificates.CAContentProvider
	AllowedClientNames                                             headerrequest.StringSliceProvider
	UsernameHeaders, UIDHeaders, GroupHeaders, ExtraHeaderPrefixes headerrequest.StringSliceProvider
}

func allowed(subject pkix.Name, names []string) error {
	if len(names) == 0 {
		return nil
	}
	for _, n := range names {
		if n == subject.CommonName {
			return nil
		}
	}
	return fmt.Errorf("x509: subject with cn=%s is not in the allowed list", subject.CommonName)
}

// Metrics are the cache's counters as metrics, read at scrape time.
type Metrics struct{ collector metrics.StableCollector }

// Register adds the metrics to r (the server's registry).
func (m *Metrics) Register(r metrics.KubeRegistry) {
	r.CustomMustRegister(m.collector)
}

// Metrics returns the cache's metrics, for the server to Register once.
func (c *Cache) Metrics() *Metrics {
	return &Metrics{collector: scraped.Collector("cluster_gateway_authentication_certificate_cache_", []scraped.Metric{
		{Name: "hits_total", Help: "Client-certificate chains found verified in the cache (no chain verification for the request).", Type: metrics.CounterValue},
		{Name: "misses_total", Help: "Client-certificate chains not in the cache (or expired, or under a changed CA bundle), verified for the request. A chain is looked up once per CA it is tried against (front proxy, then users' client CA).", Type: metrics.CounterValue},
		{Name: "entries", Help: "Verified chains held (bounded by --authentication-certificate-cache-size).", Type: metrics.GaugeValue},
	}, func() []float64 {
		hits, misses, _, size := c.Stats()
		return []float64{float64(hits), float64(misses), float64(size)}
	})}
}
