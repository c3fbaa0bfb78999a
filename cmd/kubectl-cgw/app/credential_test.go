package app

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// fakeJWT is a token with the given payload; its signature is never checked
// by the plugin.
func fakeJWT(payload string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(payload)) + ".c2lnbmF0dXJl"
}

// runCredential runs `kubectl-cgw credential args...` with KUBERNETES_EXEC_INFO
// set to info, as client-go runs a plugin.
func runCredential(t *testing.T, info string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	t.Setenv(execInfoEnv, info)
	var out, errOut bytes.Buffer
	cmd := NewCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	cmd.SetArgs(append([]string{"credential"}, args...))
	err = cmd.Execute()
	return out.String(), errOut.String(), err
}

func writeToken(t *testing.T, token string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCredentialPrintsExecCredential(t *testing.T) {
	exp := time.Now().Add(time.Hour).Truncate(time.Second)
	token := fakeJWT(fmt.Sprintf(`{"sub":"system:serviceaccount:team:consumer","exp":%d}`, exp.Unix()))
	path := writeToken(t, token)
	for _, version := range []string{"client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"} {
		t.Run(version, func(t *testing.T) {
			info := `{"apiVersion":"` + version + `","kind":"ExecCredential","spec":{"interactive":false}}`
			out, stderr, err := runCredential(t, info, "--token-file", path)
			if err != nil || stderr != "" {
				t.Fatalf("credential: %v; stderr %q", err, stderr)
			}
			var got struct {
				APIVersion, Kind string
				Status           struct {
					Token               string
					ExpirationTimestamp time.Time
				}
			}
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("stdout is not one JSON ExecCredential: %v\n%s", err, out)
			}
			if got.APIVersion != version || got.Kind != "ExecCredential" || got.Status.Token != token || !got.Status.ExpirationTimestamp.Equal(exp) {
				t.Errorf("got %+v, want %s ExecCredential with the file's token (trimmed) expiring at %v", got, version, exp)
			}
		})
	}
	// Without KUBERNETES_EXEC_INFO (run by hand): v1.
	out, _, err := runCredential(t, "", "--token-file", path)
	if err != nil || !strings.Contains(out, `"apiVersion":"client.authentication.k8s.io/v1"`) {
		t.Errorf("without %s: %v %s, want a v1 ExecCredential", execInfoEnv, err, out)
	}
}

// TestCredentialRefuses: whatever is wrong, stdout stays empty (client-go
// would parse it), the error says what to do and never quotes the token.
func TestCredentialRefuses(t *testing.T) {
	secret := "c2VjcmV0LXNpZ25hdHVyZS1ub3QtdG8tbGVhaw"
	past := time.Now().Add(-time.Minute).Unix()
	for name, c := range map[string]struct {
		content, info, want string
	}{
		"no exp":         {content: fakeJWT(`{"sub":"x"}`), want: "no exp claim"},
		"exp not number": {content: fakeJWT(`{"exp":"soon"}`), want: "not a JSON object of claims"},
		"exp negative":   {content: fakeJWT(`{"exp":-5}`), want: "not a positive number"},
		"expired":        {content: fakeJWT(fmt.Sprintf(`{"exp":%d}`, past)), want: "expired at"},
		"two parts":      {content: "abc." + secret, want: "not a JWT"},
		"bad base64":     {content: "abc.!!!." + secret, want: "not a JWT"},
		"payload array":  {content: fakeJWT(`[1]`), want: "not a JSON object of claims"},
		"empty":          {content: "", want: "not a JWT"},
		"legacy token":   {content: secret, want: "not a JWT"},
		"bad version": {content: fakeJWT(fmt.Sprintf(`{"exp":%d}`, time.Now().Add(time.Hour).Unix())),
			info: `{"apiVersion":"client.authentication.k8s.io/v1alpha1","kind":"ExecCredential"}`, want: "set the exec apiVersion"},
	} {
		t.Run(name, func(t *testing.T) {
			content := strings.Replace(c.content, "c2lnbmF0dXJl", secret, 1)
			out, _, err := runCredential(t, c.info, "--token-file", writeToken(t, content))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one saying %q", err, c.want)
			}
			if out != "" {
				t.Errorf("stdout %q, want nothing", out)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error quotes the token: %v", err)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		out, _, err := runCredential(t, "", "--token-file", filepath.Join(t.TempDir(), "none"))
		if err == nil || !strings.Contains(err.Error(), "projected ServiceAccount token") || out != "" {
			t.Errorf("err %v stdout %q, want an error saying what to mount, and no stdout", err, out)
		}
	})
	t.Run("huge file", func(t *testing.T) {
		out, _, err := runCredential(t, "", "--token-file", writeToken(t, strings.Repeat("a", maxTokenFile+10)))
		if err == nil || !strings.Contains(err.Error(), "not a ServiceAccount token") || out != "" {
			t.Errorf("err %v stdout %q, want the size refused", err, out)
		}
	})
	t.Run("arguments", func(t *testing.T) {
		if _, _, err := runCredential(t, "", "extra"); err == nil {
			t.Error("an argument was accepted")
		}
	})
}
