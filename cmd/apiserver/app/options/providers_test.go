package options

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The providers file is read and checked at start, by Complete: every
// problem is named, with the provider it is in.
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
	o := testOptions(t)
	fs := o.Flags()
	if err := fs.FlagSet("gateway").Parse([]string{"--credential-providers-file=" + file}); err != nil {
		t.Fatal(err)
	}
	err := o.Complete()
	for _, want := range []string{
		`providers[0] ("eks"): timeout must be a positive duration`,
		`providers[0] ("eks"): exec.command must be an absolute, clean path, not "aws"`,
		`providers[1] ("eks"): name is used twice`,
		`providers[1] ("eks"): exec.apiVersion must be`,
		`providers[1] ("eks"): exec.command: stat /nonexistent/plugin`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Complete() = %v\nwant it to say %s", err, want)
		}
	}
	if err := fs.FlagSet("gateway").Parse([]string{"--credential-providers-file=" + filepath.Join(dir, "missing")}); err != nil {
		t.Fatal(err)
	}
	if err := o.Complete(); err == nil || !strings.Contains(err.Error(), "--credential-providers-file: open") {
		t.Errorf("a missing file: Complete() = %v", err)
	}
}

// --inventory-sync=clusterprofile lets ClusterProfiles name every provider
// of --credential-providers-file, or those --inventory-sync-providers
// lists, and refuses a listed one the file does not configure.
func TestInventorySyncProvidersFollowTheProvidersFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "providers.yaml")
	body := `apiVersion: gateway.clustergateway.io/v1alpha1
kind: CredentialProviderConfig
providers:
- name: eks
  exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh}
- name: gke
  exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh}
`
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	validate := func(args ...string) (*Options, error) {
		o := testOptions(t)
		fss := o.Flags()
		for _, a := range args {
			name := strings.TrimPrefix(strings.SplitN(a, "=", 2)[0], "--")
			for _, fs := range fss.FlagSets {
				if fs.Lookup(name) != nil {
					if err := fs.Parse([]string{a}); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		if err := o.Complete(); err != nil {
			return o, err
		}
		return o, o.Validate()
	}
	o, err := validate("--credential-providers-file="+file, "--inventory-sync=clusterprofile")
	if err != nil || strings.Join(o.Inventory.Providers, ",") != "eks,gke" {
		t.Errorf("without --inventory-sync-providers: %v, %v; want eks,gke", o.Inventory.Providers, err)
	}
	o, err = validate("--credential-providers-file="+file, "--inventory-sync=clusterprofile", "--inventory-sync-providers=gke")
	if err != nil || strings.Join(o.Inventory.Providers, ",") != "gke" {
		t.Errorf("--inventory-sync-providers=gke: %v, %v; want gke", o.Inventory.Providers, err)
	}
	_, err = validate("--credential-providers-file="+file, "--inventory-sync=clusterprofile", "--inventory-sync-providers=gke,aks")
	if err == nil || !strings.Contains(err.Error(), `--inventory-sync-providers: "aks" is not a provider of --credential-providers-file (which has eks, gke)`) {
		t.Errorf("--inventory-sync-providers=gke,aks: %v, want aks refused", err)
	}
	_, err = validate("--inventory-sync=clusterprofile")
	if err == nil || !strings.Contains(err.Error(), "--inventory-sync=clusterprofile needs credential providers") {
		t.Errorf("no providers file: %v, want it to say providers are needed", err)
	}
}

// Validate only validates: it reads no file and defaults nothing. The
// providers file is read, and --inventory-sync-providers defaulted to its
// providers, by Complete alone.
func TestValidateOnlyValidates(t *testing.T) {
	file := filepath.Join(t.TempDir(), "providers.yaml")
	body := `apiVersion: gateway.clustergateway.io/v1alpha1
kind: CredentialProviderConfig
providers:
- name: eks
  exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh}
`
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	o := testOptions(t)
	o.CredentialProvidersFile = file
	o.Inventory.Sources = []string{"clusterprofile"}
	err := o.Validate()
	if err == nil || !strings.Contains(err.Error(), "call Complete before Validate") {
		t.Errorf("Validate without Complete: %v, want it to say Complete was not called", err)
	}
	if o.credentialProviders != nil || len(o.Inventory.Providers) > 0 {
		t.Errorf("Validate loaded the file (%v) or defaulted the providers (%v)", o.credentialProviders, o.Inventory.Providers)
	}
	if err := o.Complete(); err != nil {
		t.Fatal(err)
	}
	if o.credentialProviders == nil || strings.Join(o.Inventory.Providers, ",") != "eks" {
		t.Fatalf("Complete: providers %v, inventory providers %v; want the file loaded and eks", o.credentialProviders, o.Inventory.Providers)
	}
	// The file changes on disk: Validate still checks what Complete read.
	if err := os.WriteFile(file, []byte("not: [a config"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Errorf("Validate after Complete: %v", err)
	}
}
