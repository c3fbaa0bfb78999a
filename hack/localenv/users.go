package localenv

import (
	"path/filepath"
)

// User is a hub user with a client certificate and a kubeconfig.
type User struct {
	Name       string
	Cert       *KeyPair
	Kubeconfig string
}

// NewUser issues a hub client cert for name (group "developers", bound to
// nothing) and writes its kubeconfig; tests bind it to what they need.
func (e *Env) NewUser(name string) (*User, error) {
	cert, err := e.Hub.CA.issue(filepath.Join(e.StateDir, "pki", "hub"), name,
		certSpec{CommonName: name, Organization: []string{"developers"}, Client: true})
	if err != nil {
		return nil, err
	}
	u := &User{Name: name, Cert: cert, Kubeconfig: filepath.Join(e.StateDir, name+".kubeconfig")}
	return u, writeKubeconfig(u.Kubeconfig, "hub", e.Hub.URL, e.Hub.CA.CertPEM, cert, "")
}

// createUsers makes alice (no RBAC at all) and bob (cluster-gateway:viewer),
// for authorization tests.
func (e *Env) createUsers() error {
	var err error
	if e.Alice, err = e.NewUser("alice"); err != nil {
		return err
	}
	if e.Bob, err = e.NewUser("bob"); err != nil {
		return err
	}
	_, err = e.Kubectl(e.Hub.Kubeconfig, "create", "clusterrolebinding", "bob:cluster-gateway:viewer",
		"--clusterrole=cluster-gateway:viewer", "--user=bob")
	return err
}
