package cabundle

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"
)

func selfSigned(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestParse(t *testing.T) {
	ca := selfSigned(t)
	key := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: []byte("x")})
	cases := []struct {
		name    string
		data    []byte
		wantErr string
	}{
		{"one", ca, ""},
		{"two with text between", append(append(append([]byte("# roots\n"), ca...), "comment\n"...), selfSigned(t)...), ""},
		{"empty", nil, "no PEM certificate"},
		{"garbage", []byte("not pem"), "no PEM certificate"},
		{"a key among certificates", append(append([]byte{}, ca...), key...), "not a CERTIFICATE"},
		{"truncated", append(append([]byte{}, ca...), ca[:len(ca)/2]...), "truncated"},
		{"corrupt certificate", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("junk")}), "does not parse"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pool, err := Parse(c.data)
			switch {
			case c.wantErr == "" && (err != nil || pool == nil):
				t.Fatalf("Parse: %v", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("Parse error = %v, want one containing %q", err, c.wantErr)
			}
		})
	}
}
