package publish

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
)

// Publishing needs a namespace and an https hub URL; the hub CA file may
// hold certificates only, since it is copied into every profile.
func TestValidate(t *testing.T) {
	dir := t.TempDir()
	ca, err := testpki.NewCA("hub-ca")
	if err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "ca.crt")
	withKey := filepath.Join(dir, "ca-and-key.pem")
	_ = os.WriteFile(good, ca.CertPEM, 0o600)
	_ = os.WriteFile(withKey, append(append([]byte{}, ca.CertPEM...), ca.KeyPEM...), 0o600)
	truncated := filepath.Join(dir, "truncated.pem")
	_ = os.WriteFile(truncated, append(append([]byte{}, ca.CertPEM...), ca.CertPEM[:len(ca.CertPEM)/2]...), 0o600)
	empty := filepath.Join(dir, "empty.pem")
	_ = os.WriteFile(empty, []byte("no certificate here\n"), 0o600)
	ok := Config{Enabled: true, Namespace: "fleet", ProviderName: DefaultProviderName, HubServer: "https://hub.example.com:6443", HubCAFile: good}
	if errs := ok.Validate(); len(errs) > 0 {
		t.Fatalf("valid options refused: %v", errs)
	}
	for name, tc := range map[string]struct {
		mutate func(*Config)
		want   string
	}{
		"no namespace":       {func(o *Config) { o.Namespace = "" }, "--publish-namespace"},
		"http hub":           {func(o *Config) { o.HubServer = "http://hub:6443" }, "--publish-hub-server"},
		"hub with user":      {func(o *Config) { o.HubServer = "https://u:p@hub:6443" }, "--publish-hub-server"},
		"bad selector":       {func(o *Config) { o.Selector = "a in (" }, "--publish-gateway-selector"},
		"private key in CA":  {func(o *Config) { o.HubCAFile = withKey }, "PRIVATE KEY"},
		"truncated CA":       {func(o *Config) { o.HubCAFile = truncated }, "truncated"},
		"CA without certs":   {func(o *Config) { o.HubCAFile = empty }, "no PEM certificate"},
		"bad provider name":  {func(o *Config) { o.ProviderName = "Not_A_Name" }, "--publish-provider-name"},
		"negative CA reload": {func(o *Config) { o.HubCAReloadInterval = -time.Second }, "--publish-hub-ca-reload-interval"},
	} {
		o := ok
		tc.mutate(&o)
		errs := o.Validate()
		if len(errs) == 0 || !strings.Contains(errs[0].Error(), tc.want) {
			t.Errorf("%s: errors %v, want one naming %s", name, errs, tc.want)
		}
	}
	if errs := (&Config{}).Validate(); len(errs) > 0 {
		t.Errorf("off: %v", errs)
	}
}
