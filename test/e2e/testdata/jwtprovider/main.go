// Command jwtprovider is a credential provider for the e2e tests: it mints
// an RS256 JWT valid for JWT_TTL and prints it as an ExecCredential that
// expires with it, appending a line to JWT_RUNS for each run: when it ran,
// the token's expiry (Unix seconds) and the token, so that a test can show
// the token refused once expired.
//
//	JWT_KEY_FILE  the signing key (PKCS#1 RSA PEM)
//	JWT_ISSUER, JWT_AUDIENCE, JWT_SUBJECT, JWT_TTL (a Go duration), JWT_RUNS
package main

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"time"
)

func main() {
	raw, err := os.ReadFile(os.Getenv("JWT_KEY_FILE"))
	if err != nil {
		fail(err)
	}
	block, _ := pem.Decode(raw)
	if block == nil {
		fail(fmt.Errorf("JWT_KEY_FILE holds no PEM"))
	}
	key, err := x509.ParsePKCS1PrivateKey(block.Bytes)
	if err != nil {
		fail(err)
	}
	ttl, err := time.ParseDuration(os.Getenv("JWT_TTL"))
	if err != nil {
		fail(err)
	}
	now := time.Now()
	exp := now.Add(ttl)
	seg := func(v interface{}) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	unsigned := seg(map[string]string{"alg": "RS256", "typ": "JWT", "kid": "e2e"}) + "." + seg(map[string]interface{}{
		"iss": os.Getenv("JWT_ISSUER"), "aud": os.Getenv("JWT_AUDIENCE"), "sub": os.Getenv("JWT_SUBJECT"),
		"iat": now.Unix(), "nbf": now.Add(-time.Minute).Unix(), "exp": exp.Unix(),
	})
	sum := sha256.Sum256([]byte(unsigned))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		fail(err)
	}
	token := unsigned + "." + base64.RawURLEncoding.EncodeToString(sig)
	if p := os.Getenv("JWT_RUNS"); p != "" {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			fail(err)
		}
		fmt.Fprintln(f, now.UTC().Format(time.RFC3339), exp.Unix(), token)
		f.Close()
	}
	err = json.NewEncoder(os.Stdout).Encode(map[string]interface{}{
		"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
		"status": map[string]string{
			"token":               token,
			"expirationTimestamp": exp.UTC().Format(time.RFC3339),
		},
	})
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
