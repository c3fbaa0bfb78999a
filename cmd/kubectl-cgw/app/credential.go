package app

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientauthv1 "k8s.io/client-go/pkg/apis/clientauthentication/v1"
	clientauthv1beta1 "k8s.io/client-go/pkg/apis/clientauthentication/v1beta1"
)

// defaultTokenFile is where a pod's ServiceAccount token is mounted.
const defaultTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"

// maxTokenFile bounds what the plugin reads: a JWT is a few KiB.
const maxTokenFile = 64 << 10

// execInfoEnv is where client-go passes the ExecCredential to a plugin.
const execInfoEnv = "KUBERNETES_EXEC_INFO"

type credentialOptions struct {
	tokenFile string
	now       func() time.Time
	getenv    func(string) string
}

// newCredentialCommand is the exec credential plugin of consumers: a
// subcommand, not a binary of its own, because consumers already install
// kubectl-cgw (krew, the release archives) and one binary is one thing to
// ship, pin and verify. It never reaches the hub itself, so it uses none of
// the kubeconfig flags.
func newCredentialCommand() *cobra.Command {
	o := &credentialOptions{tokenFile: defaultTokenFile, now: time.Now, getenv: os.Getenv}
	cmd := &cobra.Command{
		Use:   "credential",
		Short: "An exec credential plugin: print the hub ServiceAccount token of a file as an ExecCredential",
		Long: `credential is a client-go exec credential plugin (kubeconfig users[].user.exec, Argo CD's
execProviderConfig, a ClusterProfile provider file's execConfig). It prints an ExecCredential
(client.authentication.k8s.io/v1, or v1beta1 when the caller asks for it) carrying the token in
--token-file, with expirationTimestamp set to the token's exp claim, so client-go runs it again
before the token expires and picks up the kubelet's refreshed projected token.

In a pod, --token-file is a projected ServiceAccount token (the default is the pod's own).
Outside a pod, any file holding a hub ServiceAccount JWT with an exp serves, for example
  kubectl create token my-consumer -n my-team --duration 1h > token
The token is not verified here (the hub does that); one without exp, malformed or expired is
refused with an error on stderr. Nothing but the ExecCredential is ever printed on stdout.`,
		Example: `  # What client-go gets, with a token written by kubectl create token
  kubectl cgw credential --token-file token

  # users[].user.exec of a kubeconfig whose server is the hub's proxy path for a cluster
  exec:
    apiVersion: client.authentication.k8s.io/v1
    command: kubectl-cgw
    args: [credential, --token-file, /var/run/secrets/hub/token]
    interactiveMode: Never`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&o.tokenFile, "token-file", o.tokenFile, "The file holding the hub ServiceAccount token (a JWT with an exp claim): a projected ServiceAccount token in a pod, or the output of kubectl create token outside one. Read on every run.")
	return cmd
}

func (o *credentialOptions) run(out io.Writer) error {
	token, exp, err := readToken(o.tokenFile)
	if err != nil {
		return err
	}
	if now := o.now(); !exp.After(now) {
		return fmt.Errorf("the token in %s expired at %s: in a pod the kubelet refreshes a projected token before it expires (is --token-file the projected one?); outside a pod write a new one (kubectl create token)", o.tokenFile, exp.UTC().Format(time.RFC3339))
	}
	version, err := o.requestedVersion()
	if err != nil {
		return err
	}
	ts := metav1.NewTime(exp)
	var cred any
	switch version {
	case clientauthv1beta1.SchemeGroupVersion.String():
		cred = &clientauthv1beta1.ExecCredential{
			TypeMeta: metav1.TypeMeta{APIVersion: version, Kind: "ExecCredential"},
			Status:   &clientauthv1beta1.ExecCredentialStatus{Token: token, ExpirationTimestamp: &ts},
		}
	default:
		cred = &clientauthv1.ExecCredential{
			TypeMeta: metav1.TypeMeta{APIVersion: version, Kind: "ExecCredential"},
			Status:   &clientauthv1.ExecCredentialStatus{Token: token, ExpirationTimestamp: &ts},
		}
	}
	b, err := json.Marshal(cred)
	if err != nil {
		return err
	}
	_, err = out.Write(append(b, '\n'))
	return err
}

// requestedVersion is the ExecCredential apiVersion client-go asked for in
// KUBERNETES_EXEC_INFO (it refuses an answer in another one); v1 without it.
func (o *credentialOptions) requestedVersion() (string, error) {
	info := o.getenv(execInfoEnv)
	if info == "" {
		return clientauthv1.SchemeGroupVersion.String(), nil
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal([]byte(info), &tm); err != nil {
		return "", fmt.Errorf("%s is not an ExecCredential: %v", execInfoEnv, err)
	}
	switch tm.APIVersion {
	case clientauthv1.SchemeGroupVersion.String(), clientauthv1beta1.SchemeGroupVersion.String():
		return tm.APIVersion, nil
	}
	return "", fmt.Errorf("%s asks for ExecCredential %q: set the exec apiVersion to %s (or %s)", execInfoEnv, tm.APIVersion, clientauthv1.SchemeGroupVersion, clientauthv1beta1.SchemeGroupVersion)
}

// readToken reads the token in path and its exp claim. The token is not
// verified: the hub does that; exp only tells client-go when to ask again.
// Errors never quote the token.
func readToken(path string) (string, time.Time, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("--token-file: %w (in a pod, mount a projected ServiceAccount token there; outside one, write one with kubectl create token)", err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return "", time.Time{}, fmt.Errorf("--token-file: %w", err)
	}
	if len(raw) > maxTokenFile {
		return "", time.Time{}, fmt.Errorf("--token-file %s is over %d KiB: not a ServiceAccount token", path, maxTokenFile>>10)
	}
	token := string(bytes.TrimSpace(raw))
	exp, err := jwtExpiry(token)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("--token-file %s: %w", path, err)
	}
	return token, exp, nil
}

var errNotJWT = errors.New("not a JWT (three base64url parts separated by dots): give a ServiceAccount token, as projected into pods or printed by kubectl create token")

// jwtExpiry is the exp claim of a JWT, read without verifying it.
func jwtExpiry(token string) (time.Time, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return time.Time{}, errNotJWT
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, errNotJWT
	}
	var claims struct {
		Exp *json.Number `json:"exp"`
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if err := dec.Decode(&claims); err != nil {
		return time.Time{}, fmt.Errorf("its payload is not a JSON object of claims: %v", err)
	}
	if claims.Exp == nil {
		return time.Time{}, errors.New("the token has no exp claim, so client-go could not know when to refresh it: use a token that expires (a projected ServiceAccount token, or kubectl create token), not a legacy Secret-based one")
	}
	secs, err := claims.Exp.Int64()
	if err != nil || secs <= 0 {
		return time.Time{}, fmt.Errorf("its exp claim %q is not a positive number of seconds", claims.Exp.String())
	}
	return time.Unix(secs, 0), nil
}
