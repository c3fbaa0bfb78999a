package gateways

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// resolution is a gateway's endpoint and credential as sent, and where the
// credential came from.
type resolution struct {
	conn        Conn
	source      string      // "" when the credential is stored in the gateway
	rotated     metav1.Time // when the source last changed the credential
	tokenExpiry time.Time   // a JWT's exp, when the token is one
	// expires is when the credential expires as its provider said (an
	// ExecCredential's expirationTimestamp): it comes before the
	// certificate's notAfter and the JWT's exp. Zero: not said.
	expires time.Time
	// Why the credential's source cannot be used (Ready=False); empty when it can.
	reason, message string
}

// inline is the resolution of a gateway whose credential is stored in it.
// A gateway whose credential has a source is resolved by the Store against
// that source; until then it is not usable.
func inline(obj *v1alpha1.ClusterGateway) resolution {
	c := obj.Spec.Credential
	r := resolution{conn: Conn{Endpoint: obj.Spec.Endpoint}}
	switch c.Type {
	case v1alpha1.CredentialX509Certificate:
		if c.X509 != nil {
			r.conn.Cert, r.conn.Key = c.X509.Certificate, c.X509.PrivateKey
		}
	case v1alpha1.CredentialBearerToken:
		r.conn.Token = c.BearerToken
		r.tokenExpiry = jwtExpiry(c.BearerToken)
	case v1alpha1.CredentialSecretRef:
		r.reason, r.message = v1alpha1.ReasonSourceNotRead, "the credential Secret has not been read: this gateway reads no credential sources"
	case v1alpha1.CredentialProvider:
		r.reason, r.message = v1alpha1.ReasonProviderFailed, "this gateway has no credential providers configured (--credential-providers-file)"
	}
	return r
}

// fromSource resolves a SecretRef gateway against its Secret: src is nil
// when the Secret does not exist or its namespace cannot be read (acc). The spec's endpoint fields win; what it leaves out
// comes from the Secret (a kubeconfig's server, CA and TLS server name, or
// ca.crt).
func fromSource(obj *v1alpha1.ClusterGateway, src *Source, acc access) resolution {
	ref := obj.Spec.Credential.SecretRef
	r := resolution{conn: Conn{Endpoint: obj.Spec.Endpoint}, source: fmt.Sprintf("Secret %s/%s", ref.Namespace, ref.Name)}
	fail := func(reason, format string, args ...interface{}) resolution {
		r.reason, r.message = reason, fmt.Sprintf("%s %s", r.source, fmt.Sprintf(format, args...))
		return r
	}
	switch acc {
	case notListed:
		return fail(v1alpha1.ReasonSourceNotRead, "is in a namespace this gateway does not read: add %q to its --credential-source-namespaces (and let it get, list and watch Secrets there)", ref.Namespace)
	case notSynced:
		return fail(v1alpha1.ReasonSourceNotRead, "cannot be read yet: the gateway has not listed the Secrets of namespace %q; check that it may get, list and watch Secrets there (its log says why)", ref.Namespace)
	}
	if src == nil {
		return fail(v1alpha1.ReasonSourceNotFound, "does not exist: create it, or point spec.credential.secretRef at the Secret that holds the credential")
	}
	r.rotated = src.rotated
	m := src.material(ref.Format)
	if m.Format != "" {
		r.source += " (" + string(m.Format) + ")"
	}
	if m.Problem != "" {
		return fail(v1alpha1.ReasonSourceMalformed, "%s", m.Problem)
	}
	ep := &r.conn.Endpoint
	if ep.Address == "" {
		if ep.Address = m.Server; ep.Address == "" {
			return fail(v1alpha1.ReasonSourceMalformed, "names no server (only a kubeconfig does): set spec.endpoint.address")
		}
	}
	if !ep.InsecureSkipTLSVerify {
		if len(ep.CABundle) == 0 {
			ep.CABundle = m.CABundle
		}
		if ep.ServerName == "" {
			ep.ServerName = m.ServerName
		}
		if m.Insecure && len(ep.CABundle) == 0 {
			return fail(v1alpha1.ReasonSourceMalformed, "skips TLS verification of the server (insecure-skip-tls-verify): the gateway verifies unless spec.endpoint.insecureSkipTLSVerify is true")
		}
	}
	if _, err := v1alpha1.ParseAddress(ep.Address); err != nil {
		return fail(v1alpha1.ReasonSourceMalformed, "has a server that cannot be used: %v", err)
	}
	if len(ep.CABundle) > 0 {
		if _, err := v1alpha1.ParseCABundle(ep.CABundle); err != nil {
			return fail(v1alpha1.ReasonSourceMalformed, "has a CA that %v", err)
		}
	}
	if len(m.Cert) > 0 {
		pair, err := v1alpha1.ParseKeyPair(m.Cert, m.Key)
		if err != nil {
			return fail(v1alpha1.ReasonSourceMalformed, "has a client certificate whose %v", err)
		}
		if !v1alpha1.ClientAuthUsable(pair.Leaf) {
			return fail(v1alpha1.ReasonSourceMalformed, "has a client certificate that is not valid for client authentication (its extended key usage lacks clientAuth)")
		}
	}
	if m.Token != "" {
		if err := v1alpha1.CheckToken(m.Token); err != nil {
			return fail(v1alpha1.ReasonSourceMalformed, "has a token that %v", err)
		}
	}
	r.conn.Token, r.conn.Cert, r.conn.Key, r.tokenExpiry = m.Token, m.Cert, m.Key, m.TokenExpiry
	return r
}
