// Command provider is a credential provider for the tests: it prints an
// ExecCredential from files the test rewrites, and can write its
// environment to a file.
//
//	PROVIDER_ENV_DUMP     write the whole environment there first (NUL-separated)
//	PROVIDER_TOKEN        the token (a literal)
//	PROVIDER_TOKEN_FILE   a file that holds the token (read each run)
//	PROVIDER_CERT_FILE    a client certificate (PEM) ...
//	PROVIDER_KEY_FILE     ... and its key (PEM)
//	PROVIDER_EXPIRED      set: the credential has expired already, so
//	                      client-go runs the provider for every request
//	PROVIDER_EXPIRES      the expirationTimestamp (RFC 3339), or a file
//	                      (an absolute path) that holds it; empty: none
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

func main() {
	if p := os.Getenv("PROVIDER_ENV_DUMP"); p != "" {
		if err := os.WriteFile(p, []byte(strings.Join(os.Environ(), "\x00")), 0o600); err != nil {
			fail(err)
		}
	}
	status := map[string]string{}
	if t := os.Getenv("PROVIDER_TOKEN"); t != "" {
		status["token"] = t
	}
	if f := os.Getenv("PROVIDER_TOKEN_FILE"); f != "" {
		raw, err := os.ReadFile(f)
		if err != nil {
			fail(err)
		}
		status["token"] = strings.TrimSpace(string(raw))
	}
	if c := os.Getenv("PROVIDER_CERT_FILE"); c != "" {
		cert, err := os.ReadFile(c)
		if err != nil {
			fail(err)
		}
		key, err := os.ReadFile(os.Getenv("PROVIDER_KEY_FILE"))
		if err != nil {
			fail(err)
		}
		status["clientCertificateData"], status["clientKeyData"] = string(cert), string(key)
	}
	if e := os.Getenv("PROVIDER_EXPIRES"); strings.HasPrefix(e, "/") {
		raw, err := os.ReadFile(e)
		if err != nil {
			fail(err)
		}
		if ts := strings.TrimSpace(string(raw)); ts != "" {
			status["expirationTimestamp"] = ts
		}
	} else if e != "" {
		status["expirationTimestamp"] = e
	}
	if os.Getenv("PROVIDER_EXPIRED") != "" {
		status["expirationTimestamp"] = "2000-01-01T00:00:00Z"
	}
	err := json.NewEncoder(os.Stdout).Encode(map[string]interface{}{
		"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": status,
	})
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
