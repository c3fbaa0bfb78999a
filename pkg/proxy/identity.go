package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apiserver/pkg/authentication/user"
)

// wsBearerPrefix is the WebSocket subprotocol in which a client may carry its
// bearer token (k8s.io/apiserver's websocket token authenticator): the
// client's own credential, never the managed cluster's business.
const wsBearerPrefix = "base64url.bearer.authorization.k8s.io."

// identityHeader tells whether a header carries a credential or an identity
// that only the gateway may assert towards a managed cluster. Names are
// compared case-insensitively and with '_' as '-', so non-canonical spellings
// (which some intermediaries fold into the canonical ones) are caught too.
func identityHeader(name string) bool {
	if !asciiName(name) {
		n := strings.ReplaceAll(strings.ToLower(name), "_", "-")
		return n == "authorization" || n == "proxy-authorization" || n == "cookie" ||
			strings.HasPrefix(n, "impersonate-") || strings.HasPrefix(n, "x-remote-")
	}
	// Every request passes each of its headers here: compare in place
	// rather than lower-casing a copy of each name.
	return headerIs(name, "authorization") || headerIs(name, "proxy-authorization") || headerIs(name, "cookie") ||
		headerHasPrefix(name, "impersonate-") || headerHasPrefix(name, "x-remote-")
}

// asciiName tells whether name is ASCII, as every valid header name is.
// The header checks compare ASCII names in place and fold any other as
// Unicode does, to be safe.
func asciiName(name string) bool {
	for i := 0; i < len(name); i++ {
		if name[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// headerIs compares an ASCII header name with a lower-case one, ignoring
// case and reading '_' as '-'.
func headerIs(name, lower string) bool {
	return len(name) == len(lower) && headerHasPrefix(name, lower)
}

func headerHasPrefix(name, lower string) bool {
	if len(name) < len(lower) {
		return false
	}
	for i := 0; i < len(lower); i++ {
		c := name[i]
		switch {
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		case c == '_':
			c = '-'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// scrubClientHeaders removes every credential and identity the client (or
// the hub, for its own hop) sent: hub credentials, claimed identities, the
// WebSocket bearer subprotocol. identity.replace runs it last before the
// wire; an upgrade also has it run on the request UpgradeAwareHandler gets,
// which logs its headers (from -v=6).
func scrubClientHeaders(h http.Header) {
	ws := false
	for k := range h {
		if identityHeader(k) {
			delete(h, k)
		} else if webSocketProtocolHeader(k) {
			ws = true
		}
	}
	if ws {
		scrubWebSocketProtocols(h)
	}
}

// scrubWebSocketProtocols drops bearer-token subprotocols and keeps the rest
// (v5.channel.k8s.io and friends) in order, each under the header name the
// client sent it with: a client that sent two spellings (say
// Sec-WebSocket-Protocol and sec_websocket_protocol) has both forwarded,
// scrubbed, as it sent them. A kube-apiserver reads a token from a
// subprotocol that starts with the prefix; one that has it anywhere, in any
// case, is dropped too, so that no spelling carries a token on.
func scrubWebSocketProtocols(h http.Header) {
	for k, vs := range h {
		if !webSocketProtocolHeader(k) {
			continue
		}
		var kept []string
		for _, v := range vs {
			for _, p := range strings.Split(v, ",") {
				p = strings.TrimSpace(p)
				if p != "" && !strings.Contains(strings.ToLower(p), wsBearerPrefix) {
					kept = append(kept, p)
				}
			}
		}
		// Only existing keys are replaced or deleted, which a range over
		// the map allows; a new key might be visited again or not.
		if len(kept) == 0 {
			delete(h, k)
		} else {
			h[k] = []string{strings.Join(kept, ", ")}
		}
	}
}

// webSocketProtocolHeader tells whether a header is Sec-WebSocket-Protocol,
// compared as identityHeader compares (case-insensitively, '_' as '-').
func webSocketProtocolHeader(name string) bool {
	if !asciiName(name) {
		return strings.EqualFold(strings.ReplaceAll(name, "_", "-"), "Sec-WebSocket-Protocol")
	}
	return headerIs(name, "sec-websocket-protocol")
}

// upgradeConnectionHeader keeps only the "Upgrade" token of an upgrade
// request's Connection header. UpgradeAwareHandler forwards upgrade requests
// without hop-by-hop processing, so a client-chosen token (say, naming
// Impersonate-User) must not reach an intermediary that honours it.
func upgradeConnectionHeader(h http.Header) {
	for k := range h {
		if strings.EqualFold(k, "Connection") {
			delete(h, k)
		}
	}
	h.Set("Connection", "Upgrade")
}

// identity is what the managed cluster is told about who is asking: the
// gateway's bearer token (X.509 credentials live in the TLS config) and, in
// Caller mode, the hub caller to impersonate.
type identity struct {
	token  string
	caller user.Info // nil: act as the stored credential
}

// replace removes the client's credentials and identities from h
// (scrubClientHeaders) and sets the gateway's identity: the one step of
// both round trippers, the ordinary (upstreamTransport) and the upgrade
// (upstreamUpgrade), that decides whom the cluster sees, last before the
// wire. h must be the round trip's own.
func (id identity) replace(h http.Header) {
	scrubClientHeaders(h)
	if id.token != "" {
		h.Set("Authorization", "Bearer "+id.token)
	}
	if id.caller != nil {
		setImpersonation(h, id.caller)
	}
}

// setImpersonation asks the managed cluster to act as the hub caller. The
// groups it adds itself and service-account-only extras (which would need
// their own impersonate permission and mean nothing there) are left out.
// Values go as they are, as client-go sends them; impersonationProblem has
// checked that headers carry them unchanged.
func setImpersonation(h http.Header, u user.Info) {
	h.Set(authenticationv1.ImpersonateUserHeader, u.GetName())
	if uid := u.GetUID(); uid != "" {
		h.Set(authenticationv1.ImpersonateUIDHeader, uid)
	}
	for _, g := range u.GetGroups() {
		if impersonatedGroup(g) {
			h.Add(authenticationv1.ImpersonateGroupHeader, g)
		}
	}
	for k, vs := range u.GetExtra() {
		if !impersonatedExtra(k) {
			continue
		}
		name := authenticationv1.ImpersonateUserExtraHeaderPrefix + extraHeaderKey(k)
		for _, v := range vs {
			h.Add(name, v)
		}
	}
}

func impersonatedGroup(g string) bool { return g != user.AllAuthenticated }

func impersonatedExtra(k string) bool { return !strings.HasPrefix(k, "authentication.kubernetes.io/") }

// impersonationProblem says which part of u's identity HTTP headers cannot
// carry unchanged, if any. net/http refuses a control byte in a value on an
// ordinary request, but an upgrade request is written by http.Request.Write,
// which turns CR and LF into spaces and passes other control bytes; and
// HTTP/1.1 drops white space at either end of a value. Either would have the
// cluster act for someone other than the caller, so such a caller is refused.
func impersonationProblem(u user.Info) string {
	if !headerCarries(u.GetName()) {
		return "user name"
	}
	if !headerCarries(u.GetUID()) {
		return "UID"
	}
	for _, g := range u.GetGroups() {
		if impersonatedGroup(g) && !headerCarries(g) {
			return "group " + strconv.Quote(g)
		}
	}
	for k, vs := range u.GetExtra() {
		if !impersonatedExtra(k) {
			continue
		}
		for _, v := range vs {
			if !headerCarries(v) {
				// The key, not the value, which may be anything.
				return "extra " + strconv.Quote(k)
			}
		}
	}
	return ""
}

// headerCarries tells whether v arrives unchanged as a header value: no
// control byte but tab, and no space or tab at either end.
func headerCarries(v string) bool {
	if v == "" {
		return true
	}
	first, last := v[0], v[len(v)-1]
	return first != ' ' && first != '\t' && last != ' ' && last != '\t' && httpguts.ValidHeaderFieldValue(v)
}

// extraHeaderKey is an extra's key as it goes into an Impersonate-Extra-
// header name. It is client-go's headerKeyEscape
// (k8s.io/client-go/transport/round_trippers.go, unexported): every byte that
// is not an HTTP token character, and '%', becomes %XX, so the name is valid
// and kube-apiserver's url.PathUnescape gives the key back (url.PathEscape
// leaves ':', '=', '@' and others as they are: an invalid name, which
// net/http refuses on an ordinary request and drops from an upgrade request
// without a word). Upper-case letters are escaped
// too, unlike client-go: kube-apiserver lower-cases the name before
// unescaping it, so an upper-case letter arrives as itself only escaped. For
// a lower-case key the result is client-go's.
func extraHeaderKey(k string) string {
	i := 0
	for i < len(k) && !escapeExtraKeyByte(k[i]) {
		i++
	}
	if i == len(k) {
		return k
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, i, len(k)+16)
	copy(b, k[:i])
	for ; i < len(k); i++ {
		c := k[i]
		if escapeExtraKeyByte(c) {
			b = append(b, '%', hex[c>>4], hex[c&15])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

func escapeExtraKeyByte(c byte) bool {
	return c >= utf8.RuneSelf || !httpguts.IsTokenRune(rune(c)) || c == '%' || ('A' <= c && c <= 'Z')
}
