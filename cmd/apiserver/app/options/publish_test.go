package options

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// With the publisher on, the published provider name is never one a
// ClusterProfile may name for the sync: dropped from the default (every
// provider of the file), refused when --inventory-sync-providers names it.
func TestPublishedProviderNotSynced(t *testing.T) {
	file := filepath.Join(t.TempDir(), "providers.yaml")
	body := `apiVersion: gateway.clustergateway.io/v1alpha1
kind: CredentialProviderConfig
providers:
- name: eks
  exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh}
- name: cluster-gateway
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
	publish := []string{"--credential-providers-file=" + file, "--inventory-sync=clusterprofile",
		"--publish-clusterprofiles", "--publish-namespace=fleet", "--publish-hub-server=https://hub:6443"}
	o, err := validate(publish...)
	if err != nil || strings.Join(o.Inventory.Providers, ",") != "eks" {
		t.Errorf("publishing: sync providers %v, %v; want eks only", o.Inventory.Providers, err)
	}
	_, err = validate(append(publish, "--inventory-sync-providers=eks,cluster-gateway")...)
	if err == nil || !strings.Contains(err.Error(), `"cluster-gateway" is the name the gateway publishes itself under`) {
		t.Errorf("--inventory-sync-providers naming the published provider: %v, want it refused", err)
	}
	o, err = validate("--credential-providers-file="+file, "--inventory-sync=clusterprofile")
	if err != nil || strings.Join(o.Inventory.Providers, ",") != "eks,cluster-gateway" {
		t.Errorf("not publishing: %v, %v; want both", o.Inventory.Providers, err)
	}
	if _, err := validate("--publish-clusterprofiles"); err == nil || !strings.Contains(err.Error(), "--publish-namespace") || !strings.Contains(err.Error(), "--publish-hub-server") {
		t.Errorf("publishing without namespace and hub: %v", err)
	}
	if _, err := validate("--publish-clusterprofiles", "--publish-namespace=fleet", "--publish-hub-server=https://hub:6443", "--inventory-sync-retry-period=0"); err == nil || !strings.Contains(err.Error(), "--inventory-sync-retry-period must be positive") {
		t.Errorf("publishing alone with a bad Lease timing: %v, want it refused", err)
	}
}
