package pool

import (
	"bytes"
	"net/url"
)

// shape is a private copy of the Target fields that Fingerprint covers. An
// entry keeps the shape it was built from so that Acquire can recognise the
// same Target by comparing bytes (tens of ns, no allocation) instead of
// hashing CA, certificate and key on every request (about 1 µs, 4 allocs).
// The slices are cloned: a caller reusing its buffers cannot alias them.
type shape struct {
	cluster    string
	address    url.URL
	hasAddress bool
	additional []url.URL
	caData     []byte
	serverName string
	insecure   bool
	certData   []byte
	keyData    []byte
	proxyURL   url.URL
	hasProxy   bool
	tunnel     bool
	tunnelID   string
}

func shapeOf(t *Target) shape {
	s := shape{
		cluster:    t.Cluster,
		caData:     bytes.Clone(t.CAData),
		serverName: t.ServerName,
		insecure:   t.Insecure,
		certData:   bytes.Clone(t.CertData),
		keyData:    bytes.Clone(t.KeyData),
		tunnel:     t.Tunnel != nil,
		tunnelID:   t.TunnelID,
	}
	if t.Address != nil {
		s.address, s.hasAddress = *t.Address, true
	}
	for _, u := range t.Additional {
		s.additional = append(s.additional, *u)
	}
	if t.ProxyURL != nil {
		s.proxyURL, s.hasProxy = *t.ProxyURL, true
	}
	return s
}

// same reports whether t has exactly this shape; then its Fingerprint equals
// the entry's. False may still be the same fingerprint (an equal URL spelled
// differently): Acquire then falls back to hashing.
func (s *shape) same(t *Target) bool {
	return t.Cluster == s.cluster &&
		sameURL(t.Address, &s.address, s.hasAddress) &&
		sameURLs(t.Additional, s.additional) &&
		t.ServerName == s.serverName &&
		t.Insecure == s.insecure &&
		sameURL(t.ProxyURL, &s.proxyURL, s.hasProxy) &&
		(t.Tunnel != nil) == s.tunnel &&
		t.TunnelID == s.tunnelID &&
		bytes.Equal(t.CAData, s.caData) &&
		bytes.Equal(t.CertData, s.certData) &&
		bytes.Equal(t.KeyData, s.keyData)
}

func sameURLs(us []*url.URL, kept []url.URL) bool {
	if len(us) != len(kept) {
		return false
	}
	for i, u := range us {
		if u == nil || *u != kept[i] {
			return false
		}
	}
	return true
}

func sameURL(u, kept *url.URL, has bool) bool {
	if u == nil {
		return !has
	}
	return has && *u == *kept
}

// acquireSame is Acquire's fast path: a lease, into l, on the live entry
// when it was built from a Target of the same shape, with no validation (the
// entry's Target passed it) and no hashing. ok is false when Acquire must go
// on.
func (p *Pool) acquireSame(l *Lease, t *Target) (ok bool, err error) {
	if t == nil {
		return false, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return true, ErrClosed
	}
	if e, found := p.lru.Get(t.Cluster); found && e.shape.same(t) {
		e.lease(l, p.now())
		return true, nil
	}
	return false, nil
}
