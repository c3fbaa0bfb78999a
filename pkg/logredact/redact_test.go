package logredact

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
)

const (
	token  = "eyJhbGciOiJSUzI1NiJ9.c2VjcmV0LXRva2Vu.sig-part_42"
	keyPEM = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5oCMZ5Yd3+Nq9oAoGCCqGSM49\n-----END EC PRIVATE KEY-----\n"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// leaks lists the forms in which the credentials could show in a log.
func leaks(out string) []string {
	var found []string
	for _, needle := range []string{
		token,
		base64.StdEncoding.EncodeToString([]byte(token)),
		"MHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5oCMZ5Yd3",
		base64.StdEncoding.EncodeToString([]byte(keyPEM))[20:60],
		"proxypass",
	} {
		if strings.Contains(out, needle) {
			found = append(found, needle)
		}
	}
	return found
}

// The real libraries at -v=10, writing through the redactor: client-go logs
// the bodies of a Secret list and a TokenReview, and its request headers;
// nothing of the credentials reaches the log.
func TestClientGoAtV10(t *testing.T) {
	secret := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{Kind: "Secret", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: "ns"},
		Data:       map[string][]byte{"token": []byte(token), "tls.key": []byte(keyPEM), "proxy-url": []byte("http://u:proxypass@proxy:3128")},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"SecretList","apiVersion":"v1","metadata":{},"items":[` + mustJSON(t, secret) + `]}`))
	}))
	defer srv.Close()

	out := &syncBuf{}
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(10), textlogger.Output(NewWriter(out))))
	ctx := klog.NewContext(context.Background(), logger)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, BearerToken: token})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Secrets("ns").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	_, _ = cs.CoreV1().Secrets("ns").Create(ctx, secret, metav1.CreateOptions{})
	logged := out.String()
	if !strings.Contains(logged, "Response Body") || !strings.Contains(logged, "Request Body") {
		t.Fatalf("client-go did not log bodies at -v=10, so this test proves nothing:\n%s", logged)
	}
	if found := leaks(logged); len(found) > 0 {
		t.Fatalf("credentials in the log: %q\n%s", found, logged)
	}
}

// Headers logged as values (as apimachinery's upgrade proxy does at -v=6)
// and messages that quote credentials are masked, in the JSON format too.
func TestStructuredValues(t *testing.T) {
	out := &syncBuf{}
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(10), textlogger.Output(NewWriter(out))))
	logHeaders(logger)
	if found := leaks(out.String()); len(found) > 0 || !strings.Contains(out.String(), Masked) {
		t.Fatalf("leaks %q in:\n%s", found, out)
	}

	var js bytes.Buffer
	w := NewWriter(&js)
	_, _ = w.Write([]byte(`{"ts":1,"caller":"rest/request.go:1208","msg":"Response Body","v":8,"body":"{\"data\":{\"token\":\"` + base64.StdEncoding.EncodeToString([]byte(token)) + `\"}}"}` + "\n"))
	_, _ = w.Write([]byte(`{"ts":1,"msg":"dial","proxy":"socks5://u:proxypass@127.0.0.1:1080","auth":"Bearer ` + token + `"}` + "\n"))
	if found := leaks(js.String()); len(found) > 0 {
		t.Fatalf("leaks %q in JSON:\n%s", found, js.String())
	}
	if !strings.Contains(js.String(), `"msg":"Response Body"`) || !strings.Contains(js.String(), `"msg":"dial"`) {
		t.Fatalf("the entries themselves must stay: %s", js.String())
	}
	// Prose about tokens is left alone.
	if got := string(Redact([]byte("the bearer token was rotated"))); got != "the bearer token was rotated" {
		t.Fatalf("prose changed: %q", got)
	}
}

func logHeaders(l logr.Logger) {
	l.V(6).Info("Connecting to backend proxy (direct dial)", "headers", http.Header{
		"Authorization":          {"Bearer " + token},
		"Sec-Websocket-Protocol": {"base64url.bearer.authorization.k8s.io." + base64.RawURLEncoding.EncodeToString([]byte(token)) + ", v5.channel.k8s.io"},
	})
	l.Info("loaded", "key", keyPEM, "proxy", "http://u:proxypass@proxy:3128")
	// A password with a '/' (not percent-encoded): no user info to a URL parser.
	l.Info("loaded", "proxy", "http://u:/proxypass@proxy:3128", "other", "socks5://u:12/proxypass?x#y@proxy:1080", "at", "http://u:p@proxypass@proxy:3128")
}

func mustJSON(t *testing.T, obj any) string {
	t.Helper()
	var b bytes.Buffer
	if err := jsonEncode(&b, obj); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(b.String())
}

func jsonEncode(w *bytes.Buffer, obj any) error { return json.NewEncoder(w).Encode(obj) }
