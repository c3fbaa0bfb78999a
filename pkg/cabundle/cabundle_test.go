package cabundle

import (
	"encoding/pem"
	"strings"
	"testing"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
)

// selfSigned is the PEM of a new CA's certificate.
func selfSigned(t *testing.T) []byte {
	t.Helper()
	return testpki.MustCA(t, "ca").CertPEM
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
