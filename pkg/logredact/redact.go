// Package logredact keeps credentials out of the gateway's logs at every
// verbosity. Libraries the gateway uses log more than is safe for a server
// that reads credentials: client-go logs request and response bodies from -v=8
// (the hub's Secret lists, a caller's TokenReview), and apimachinery's upgrade
// proxy logs request headers from -v=6. The gateway keeps credentials off the
// requests it hands to those libraries, and every log entry passes through a
// Writer that removes what may still hold one.
package logredact

import (
	"bytes"
	"encoding/base64"
	"io"
	"regexp"
)

// Masked replaces what was removed.
const Masked = "<masked>"

// NewWriter returns a Writer that redacts each log entry before passing it to w.
func NewWriter(w io.Writer) io.Writer { return &writer{w: w} }

type writer struct{ w io.Writer }

// Write takes one log entry (klog's text and JSON loggers write an entry per
// call) and reports all of p written, as loggers expect.
func (r *writer) Write(p []byte) (int, error) {
	if _, err := r.w.Write(Redact(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

var (
	bodyMessages = [][]byte{[]byte(`"Request Body"`), []byte(`"Response Body"`)}
	bearer       = regexp.MustCompile(`(?i)(bearer(?:\s|%20|\\t)+)([^\s"'\\,;<>]+)`)
	wsBearer     = regexp.MustCompile(`(?i)(base64url\.bearer\.authorization\.k8s\.io\.)[A-Za-z0-9_\-=]+`)
	pemKey       = regexp.MustCompile(`(?s)-----BEGIN[ A-Z0-9]*PRIVATE KEY-----.*?(-----END[ A-Z0-9]*PRIVATE KEY-----|$)`)
	b64PEM       = regexp.MustCompile(`LS0tLS1CRUdJT[A-Za-z0-9+/=]+`)
	// Up to the last '@' before a space, quote or backslash: a password
	// holding a '/', '?', '#' or '@' that is not percent-encoded ends the
	// URL's authority elsewhere, but is still a password.
	userInfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.\-]*://)[^\s"'\\]+@`)
)

// Redact returns the entry with every credential it may hold removed:
// API bodies (they hold Secrets and TokenReviews), bearer tokens (also as
// WebSocket subprotocols), PEM private keys (also base64-encoded) and the
// user info of URLs.
func Redact(p []byte) []byte {
	out := p
	for _, m := range bodyMessages {
		if i := bytes.Index(out, m); i >= 0 {
			out = cutBody(out, i+len(m))
			break
		}
	}
	if bytes.Contains(out, []byte("earer")) || bytes.Contains(out, []byte("EARER")) {
		out = bearer.ReplaceAllFunc(out, func(m []byte) []byte {
			sub := bearer.FindSubmatch(m)
			switch string(bytes.ToLower(sub[2])) {
			case "token", "tokens": // prose, as in "the bearer token"
				return m
			}
			return append(append([]byte{}, sub[1]...), Masked...)
		})
		out = wsBearer.ReplaceAll(out, []byte("${1}"+Masked))
	}
	if bytes.Contains(out, []byte("PRIVATE KEY")) {
		out = pemKey.ReplaceAll(out, []byte("<private key masked>"))
	}
	if bytes.Contains(out, []byte("LS0tLS1CRUdJT")) {
		out = b64PEM.ReplaceAllFunc(out, func(m []byte) []byte {
			dec := make([]byte, base64.StdEncoding.DecodedLen(len(m)))
			n, _ := base64.StdEncoding.Decode(dec, m)
			if bytes.Contains(dec[:n], []byte("PRIVATE KEY")) {
				return []byte("<private key masked>")
			}
			return m
		})
	}
	if bytes.Contains(out, []byte("://")) && bytes.IndexByte(out, '@') >= 0 {
		out = userInfo.ReplaceAll(out, []byte("${1}"+Masked+"@"))
	}
	return out
}

// cutBody drops the body of a client-go "Request Body"/"Response Body"
// entry, in the text (body=...) or JSON ("body":...) format.
func cutBody(p []byte, from int) []byte {
	const note = "<redacted: the gateway does not log API bodies, which may hold credentials>"
	rest := p[from:]
	if i := bytes.Index(rest, []byte(`"body":`)); i >= 0 {
		out := append([]byte{}, p[:from+i]...)
		return append(out, []byte(`"body":"`+note+"\"}\n")...)
	}
	if i := bytes.Index(rest, []byte("body=")); i >= 0 {
		out := append([]byte{}, p[:from+i]...)
		return append(out, []byte(`body="`+note+"\"\n")...)
	}
	out := append([]byte{}, p[:from]...)
	return append(out, []byte(" "+note+"\n")...)
}
