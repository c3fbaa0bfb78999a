package localenv

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// Manifests in config/ applied unchanged to the hub.
var configFiles = []string{"namespace.yaml", "serviceaccount.yaml", "rbac.yaml", "user-roles.yaml"}

// installConfig applies config/ to the hub with the real kubectl, except the
// Deployment (the gateway runs as a local process instead). The Service and
// APIService are rewritten for local wiring, see localService/localAPIService.
func (e *Env) installConfig() error {
	args := []string{"apply"}
	for _, f := range configFiles {
		args = append(args, "-f", filepath.Join(e.ConfigDir, f))
	}
	svc, err := e.serviceFilesFor(e.Gateway.Port)
	if err != nil {
		return err
	}
	_, err = e.Kubectl(e.Hub.Kubeconfig, append(args, svc...)...)
	return err
}

// localService makes the Service an ExternalName to localhost: the hub's
// aggregator (with --enable-aggregator-routing=false) turns that into
// https://localhost:<APIService port>, while Endpoints refuse loopback IPs.
func localService(port int) func(map[string]any) {
	return func(obj map[string]any) {
		spec := obj["spec"].(map[string]any)
		delete(spec, "selector")
		spec["type"] = "ExternalName"
		spec["externalName"] = "localhost"
		spec["ports"] = []any{map[string]any{"name": "https", "port": port}}
	}
}

// localAPIService points the APIService at the gateway's port (for an
// ExternalName Service the aggregator dials the APIService's port, not the
// Service's) and trusts the gateway's serving CA.
func localAPIService(port int, caPEM []byte) func(map[string]any) {
	return func(obj map[string]any) {
		spec := obj["spec"].(map[string]any)
		spec["service"].(map[string]any)["port"] = port
		spec["caBundle"] = base64.StdEncoding.EncodeToString(caPEM)
		delete(spec, "insecureSkipTLSVerify")
	}
}

// rewrite reads config/<name>, applies edit, and writes it to <state>/manifests.
func (e *Env) rewrite(name string, edit func(map[string]any)) (string, error) {
	src := filepath.Join(e.ConfigDir, name)
	b, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	var obj map[string]any
	if err := yaml.Unmarshal(b, &obj); err != nil {
		return "", fmt.Errorf("%s: %w", src, err)
	}
	if _, ok := obj["spec"].(map[string]any); !ok {
		return "", fmt.Errorf("%s: no spec; expected a single object", src)
	}
	edit(obj)
	out, err := yaml.Marshal(obj)
	if err != nil {
		return "", err
	}
	dst := filepath.Join(e.StateDir, "manifests", "local-"+name)
	return dst, os.WriteFile(dst, out, 0o644)
}

// findConfigDir finds config/ in the repository holding the working directory
// (the repository root for `make demo`, test/e2e for `go test`).
func findConfigDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "config", "apiservice.yaml")); err == nil {
			return filepath.Join(dir, "config"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("config/apiservice.yaml not found above the working directory; set Options.ConfigDir")
		}
		dir = parent
	}
}
