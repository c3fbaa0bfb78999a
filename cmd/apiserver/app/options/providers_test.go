package options

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The providers file is read and checked at start: every problem is named,
// with the provider it is in.
func TestCredentialProvidersFileValidated(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "providers.yaml")
	body := `apiVersion: gateway.clustergateway.io/v1alpha1
kind: CredentialProviderConfig
providers:
- name: eks
  timeout: soon
  exec: {apiVersion: client.authentication.k8s.io/v1, command: aws}
- name: eks
  exec: {apiVersion: v1, command: /nonexistent/plugin}
`
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	o := NewOptions()
	fs := o.Flags()
	if err := fs.FlagSet("gateway").Parse([]string{"--credential-providers-file=" + file}); err != nil {
		t.Fatal(err)
	}
	err := o.Validate()
	for _, want := range []string{
		`providers[0] ("eks"): timeout must be a positive duration`,
		`providers[0] ("eks"): exec.command must be an absolute, clean path, not "aws"`,
		`providers[1] ("eks"): name is used twice`,
		`providers[1] ("eks"): exec.apiVersion must be`,
		`providers[1] ("eks"): exec.command: stat /nonexistent/plugin`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v\nwant it to say %s", err, want)
		}
	}
	if err := fs.FlagSet("gateway").Parse([]string{"--credential-providers-file=" + filepath.Join(dir, "missing")}); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--credential-providers-file: open") {
		t.Errorf("a missing file: Validate() = %v", err)
	}
}
