package pool

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"golang.org/x/net/idna"
)

// ErrInvalidTarget marks errors caused by a Target that cannot produce a
// working transport (bad address, CA bundle, client certificate or proxy).
// Callers can map it to a response that points at the ClusterGateway spec.
var ErrInvalidTarget = errors.New("invalid cluster gateway target")

// Dialer opens connections through a tunnel (konnectivity). It must be safe for
// concurrent use: every connection of an entry is dialed through it.
type Dialer interface {
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

// Target is what shapes a cluster's transport. The bearer token is not part of
// it: the caller injects it per request, so a token rotation reuses the entry.
type Target struct {
	Cluster string   // ClusterGateway name (the LRU key)
	Address *url.URL // https://host:port of the managed API server
	// Additional are more https://host:port of the same API (same CA,
	// server names and credential): the entry spreads requests over
	// Address and these.
	Additional []*url.URL
	CAData     []byte // PEM; empty means system roots
	ServerName string
	Insecure   bool
	CertData   []byte // client certificate (optional, with KeyData)
	KeyData    []byte
	ProxyURL   *url.URL // optional http, https or socks5 proxy
	Tunnel     Dialer   // non-nil: dial through this; excludes ProxyURL
	// TunnelID identifies the tunnel and must change whenever Tunnel would
	// stop working for this entry (credential rotation, new proxy server):
	// the pool keeps the Dialer it saw when the entry was created.
	TunnelID string
}

// Fingerprint is a sha256 over every field except the Tunnel pointer (its
// identity is TunnelID). Fields are length-prefixed so no two different
// targets can collide by shifting bytes between neighbouring fields.
func (t *Target) Fingerprint() string {
	h := sha256.New()
	var n [8]byte
	field := func(b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	str := func(s string) { field([]byte(s)) }
	flag := func(b bool) {
		if b {
			str("1")
		} else {
			str("0")
		}
	}
	str("cluster-gateway-pool/v1")
	str(t.Cluster)
	if t.Address != nil {
		str(t.Address.String())
	} else {
		str("")
	}
	str(fmt.Sprint(len(t.Additional)))
	for _, u := range t.Additional {
		str(u.String())
	}
	field(t.CAData)
	str(t.ServerName)
	flag(t.Insecure)
	field(t.CertData)
	field(t.KeyData)
	if t.ProxyURL != nil {
		str(t.ProxyURL.String())
	} else {
		str("")
	}
	flag(t.Tunnel != nil)
	str(t.TunnelID)
	return hex.EncodeToString(h.Sum(nil))
}

// validate checks what can be checked without parsing key material.
func (t *Target) validate() error {
	if t == nil {
		return fmt.Errorf("%w: nil target", ErrInvalidTarget)
	}
	if t.Cluster == "" {
		return fmt.Errorf("%w: empty Cluster; set it to the ClusterGateway name", ErrInvalidTarget)
	}
	if t.Address == nil || t.Address.Host == "" {
		return fmt.Errorf("%w: cluster %q has no address; set an https://host:port endpoint", ErrInvalidTarget, t.Cluster)
	}
	if t.Address.Scheme != "https" {
		return fmt.Errorf("%w: cluster %q address %q must use https", ErrInvalidTarget, t.Cluster, withoutUserInfo(t.Address))
	}
	if t.Tunnel != nil && t.ProxyURL != nil {
		return fmt.Errorf("%w: cluster %q sets both a tunnel and a proxy URL; use one", ErrInvalidTarget, t.Cluster)
	}
	if t.Tunnel != nil && t.TunnelID == "" {
		return fmt.Errorf("%w: cluster %q has a tunnel without TunnelID; set it so rotation is detected", ErrInvalidTarget, t.Cluster)
	}
	if t.Insecure && len(t.CAData) > 0 {
		return fmt.Errorf("%w: cluster %q sets both Insecure and a CA bundle; drop one", ErrInvalidTarget, t.Cluster)
	}
	if (len(t.CertData) == 0) != (len(t.KeyData) == 0) {
		return fmt.Errorf("%w: cluster %q has a client certificate without its key (or a key without its certificate); set both or neither", ErrInvalidTarget, t.Cluster)
	}
	seen := map[string]bool{}
	for _, u := range t.addresses() {
		if u == nil || u.Host == "" || u.Scheme != "https" {
			return fmt.Errorf("%w: cluster %q has an additional address that is not an https://host:port URL", ErrInvalidTarget, t.Cluster)
		}
		hp := canonicalAddr(u, "443")
		if seen[hp] {
			return fmt.Errorf("%w: cluster %q names %s twice among its addresses; name each API server once", ErrInvalidTarget, t.Cluster, hp)
		}
		seen[hp] = true
	}
	if len(seen) > maxAddresses {
		return fmt.Errorf("%w: cluster %q has %d addresses; at most %d are supported", ErrInvalidTarget, t.Cluster, len(seen), maxAddresses)
	}
	return nil
}

// maxAddresses bounds a target's addresses (the spreading keeps a bit per
// address of those a request tried).
const maxAddresses = 64

// addresses is Address followed by Additional.
func (t *Target) addresses() []*url.URL {
	return append([]*url.URL{t.Address}, t.Additional...)
}

// canonicalAddr is host:port with the scheme's default port, in the form
// http.Transport passes to DialContext (IDNA hosts in punycode).
func canonicalAddr(u *url.URL, defaultPort string) string {
	port := u.Port()
	if port == "" {
		port = defaultPort
	}
	host := u.Hostname()
	if ascii, err := idna.Lookup.ToASCII(host); err == nil {
		host = ascii
	}
	return net.JoinHostPort(strings.ToLower(host), port)
}
