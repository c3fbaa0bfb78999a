package gateways

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// Resolution is a gateway's endpoint and credential as sent, and where the
// credential came from. A gateway whose credential is stored in it has its
// own (inline); one whose credential has a source (a Secret, a provider) is
// resolved by its cluster's record (pkg/clusters), which keeps the result.
type Resolution struct {
	Conn        Conn
	Source      string      // "" when the credential is stored in the gateway
	Rotated     metav1.Time // when the source last changed the credential
	TokenExpiry time.Time   // a JWT's exp, when the token is one
	// Expires is when the credential expires as its provider said (an
	// ExecCredential's expirationTimestamp): it comes before the
	// certificate's notAfter and the JWT's exp. Zero: not said.
	Expires time.Time
	// Why the credential's source cannot be used (Ready=False); empty when it can.
	Reason, Message string
}

// inline is the resolution of a gateway as its Secret stores it: its
// credential when stored in it; else not usable until its record resolves
// it. It is the parsed gateway's own, so a gateway with an inline
// credential is kept once, not once more resolved.
func inline(obj *v1alpha1.ClusterGateway) Resolution {
	c := obj.Spec.Credential
	r := Resolution{Conn: Conn{Endpoint: obj.Spec.Endpoint}}
	switch c.Type {
	case v1alpha1.CredentialX509Certificate:
		if c.X509 != nil {
			r.Conn.Cert, r.Conn.Key = c.X509.Certificate, c.X509.PrivateKey
		}
	case v1alpha1.CredentialBearerToken:
		r.Conn.Token = c.BearerToken
		r.TokenExpiry = JWTExpiry(c.BearerToken)
	case v1alpha1.CredentialSecretRef:
		r.Reason, r.Message = v1alpha1.ReasonSourceNotRead, "the credential Secret has not been read: this gateway reads no credential sources"
	case v1alpha1.CredentialProvider:
		r.Reason, r.Message = v1alpha1.ReasonProviderFailed, "this gateway has no credential providers configured (--credential-providers-file)"
	}
	return r
}

// HasSource tells whether g's credential comes from elsewhere (a Secret or
// a provider): its record resolves it.
func (g *Gateway) HasSource() bool {
	t := g.Object.Spec.Credential.Type
	return t == v1alpha1.CredentialSecretRef || t == v1alpha1.CredentialProvider
}

// WithResolution is g, as stored, with its credential resolved as r, and
// its status computed from that as of now. It is a new gateway; g is
// unchanged.
func (g *Gateway) WithResolution(r Resolution, now time.Time) *Gateway {
	obj := *g.Object // the same gateway but for its status
	return withStatus(g.stored, &obj, r, now)
}

// At is the gateway as of now: itself, unless the clock has since crossed
// its credential's notBefore or notAfter (see at).
func (g *Gateway) At(now time.Time) *Gateway { return g.at(now) }

// Resolver completes a stored gateway (Store.Stored) with its credential's
// source: the clusters' records. The Store reads through it for the API's
// view.
type Resolver interface {
	Resolve(g *Gateway) *Gateway
}
