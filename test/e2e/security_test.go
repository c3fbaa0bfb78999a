package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
	"github.com/clustergateway/cluster-gateway/internal/testpki"
	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// The security tests attack the gateway as a hub caller, a ClusterGateway
// writer without Secret access and a network neighbour would, and assert
// what the managed cluster saw: the identity a real cluster reports
// (SelfSubjectReview), or what a capture cluster recorded.

const ssrBody = `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`

// securityFixture is what every security test shares.
type securityFixture struct {
	capture     *captureCluster
	token       string // the stored token of the capture gateways
	tokenGW     string // BearerToken, None, to the capture
	callerGW    string // BearerToken, Caller, to the capture
	realCaller  string // X509 (system:masters), Caller, to managed-1
	alice       tls.Certificate
	hubCA, gwCA []byte
}

func newSecurityFixture(t *testing.T) *securityFixture {
	t.Helper()
	requireGateway(t)
	f := &securityFixture{capture: startCapture(t), token: randomToken(t), hubCA: env.Hub.CA.CertPEM, gwCA: env.Gateway.CA.CertPEM}
	f.tokenGW = uniqueName(t, "sec-token")
	f.callerGW = uniqueName(t, "sec-caller")
	f.realCaller = uniqueName(t, "sec-real")
	tok := f.captureGateway(f.tokenGW, f.capture, f.token)
	createGateway(t, tok)
	caller := tok.DeepCopy()
	caller.Name = f.callerGW
	caller.Spec.Impersonation.Mode = gatewayv1alpha1.ImpersonationCaller
	createGateway(t, caller)
	real := directGateway(f.realCaller, 0)
	real.Spec.Impersonation.Mode = gatewayv1alpha1.ImpersonationCaller
	createGateway(t, real)

	// alice (group developers) may use the proxy; nothing else.
	bind(t, "clusterrolebinding", uniqueName(t, "alice-proxy"), "--clusterrole=cluster-gateway:proxy", "--user="+env.Alice.Name)
	var err error
	if f.alice, err = tls.X509KeyPair(env.Alice.Cert.CertPEM, env.Alice.Cert.KeyPEM); err != nil {
		t.Fatal(err)
	}
	return f
}

// captureGateway is a BearerToken gateway to c that verifies c's certificate.
func (f *securityFixture) captureGateway(name string, c *captureCluster, token string) *gatewayv1alpha1.ClusterGateway {
	gw := tokenGateway(name, c.URL, token)
	gw.Spec.Endpoint.InsecureSkipTLSVerify = false
	gw.Spec.Endpoint.CABundle = c.CAPEM
	return gw
}

// bind runs `kubectl create <kind> <name> args...` on the hub as admin and
// deletes it at cleanup.
func bind(t *testing.T, kind, name string, args ...string) {
	t.Helper()
	mustKubectl(t, env.Hub.Kubeconfig, append([]string{"create", kind, name}, args...)...)
	t.Cleanup(func() { _ = kubectl(t, env.Hub.Kubeconfig, nil, "", "delete", kind, name) })
}

// via says where a raw request goes: straight to the gateway's port, or
// through the hub's aggregator.
type via struct {
	name, addr string
	ca         []byte
}

func (f *securityFixture) targets() []via {
	return []via{{"direct", hostOf(env.Gateway.URL), f.gwCA}, {"hub", hostOf(env.Hub.URL), f.hubCA}}
}

// send makes a raw HTTP/1.1 request as alice.
func (f *securityFixture) send(t *testing.T, v via, method, path string, headers []string, body string) rawResponse {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, path, v.addr)
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	if body != "" {
		fmt.Fprintf(&b, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n" + body)
	return rawRequest(t, v.addr, v.ca, &f.alice, b.String())
}

// reviewedUser is the user a SelfSubjectReview's answer names.
func reviewedUser(r rawResponse) (authenticationv1.UserInfo, error) {
	var ssr authenticationv1.SelfSubjectReview
	if r.Code != http.StatusCreated {
		return authenticationv1.UserInfo{}, fmt.Errorf("%d %s", r.Code, r.Body)
	}
	if err := json.Unmarshal([]byte(r.Body), &ssr); err != nil {
		return authenticationv1.UserInfo{}, fmt.Errorf("%v: %s", err, r.Body)
	}
	return ssr.Status.UserInfo, nil
}

// identityAt returns the identity headers a captured request carried.
func identityAt(r capturedRequest) map[string][]string {
	out := map[string][]string{}
	for k, v := range r.Header {
		n := strings.ReplaceAll(strings.ToLower(k), "_", "-")
		if n == "authorization" || n == "proxy-authorization" || n == "cookie" || strings.HasPrefix(n, "impersonate-") || strings.HasPrefix(n, "x-remote-") {
			out[k] = v
		}
	}
	return out
}

func (f *securityFixture) wantIdentity(t *testing.T, r capturedRequest, caller bool) {
	t.Helper()
	want := map[string][]string{"Authorization": {"Bearer " + f.token}}
	if caller {
		want["Impersonate-User"] = []string{env.Alice.Name}
		want["Impersonate-Group"] = []string{"developers"}
	}
	got := identityAt(r)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("identity headers at the cluster\n got %v\nwant %v", got, want)
	}
}

func TestSecurity(t *testing.T) {
	f := newSecurityFixture(t)
	t.Run("hop-by-hop headers cannot remove the gateway's identity", f.testHopByHop)
	t.Run("HTTP/2 refuses connection-specific headers", f.testHTTP2ConnectionHeader)
	t.Run("client credentials and claimed identities never reach a cluster", f.testHeaderHygiene)
	t.Run("writers cannot move the stored credential", f.testWritersCannotRedirect)
	t.Run("upgrades need create", f.testUpgradesNeedCreate)
	t.Run("proxy credentials are write-only", f.testProxyCredentials)
	t.Run("relative paths are refused", f.testPaths)
	t.Run("bad material is refused at write", f.testBadMaterial)
	t.Run("redirects are not passed on", f.testRedirects)
	t.Run("Secrets carry no caller metadata", f.testSecretMetadata)
	t.Run("endpoint policy", f.testEndpointPolicy)
}

// 1. Connection: Impersonate-*, Authorization from the client, directly and
// through the hub, for ordinary requests and upgrades.
func (f *securityFixture) testHopByHop(t *testing.T) {
	hostile := "Impersonate-User, Impersonate-Group, Impersonate-Uid, Impersonate-Extra-Scopes, Authorization"
	for _, v := range f.targets() {
		t.Run(v.name, func(t *testing.T) {
			// A real cluster says whom it served: the caller, not the
			// gateway's system:masters credential.
			r := f.send(t, v, http.MethodPost, proxyPath(f.realCaller, "/apis/authentication.k8s.io/v1/selfsubjectreviews"),
				[]string{"Connection: close, " + hostile}, ssrBody)
			u, err := reviewedUser(r)
			if err != nil {
				t.Fatalf("SelfSubjectReview through the gateway: %v", err)
			}
			if u.Username != env.Alice.Name || slices.Contains(u.Groups, "system:masters") || !slices.Contains(u.Groups, "developers") {
				t.Fatalf("managed-1 served %q in %v; want alice (developers), never the gateway's own credential", u.Username, u.Groups)
			}

			for _, gw := range []struct {
				name   string
				caller bool
			}{{f.tokenGW, false}, {f.callerGW, true}} {
				n := len(f.capture.requests())
				r := f.send(t, v, http.MethodGet, proxyPath(gw.name, "/api/v1/namespaces"), []string{"Connection: close, " + hostile}, "")
				got := f.capture.since(n)
				if r.Code != http.StatusOK || len(got) != 1 {
					t.Fatalf("%s: %d %s; the cluster received %d requests", gw.name, r.Code, r.Body, len(got))
				}
				f.wantIdentity(t, got[0], gw.caller)

				// The same over an upgrade (exec over WebSocket).
				n = len(f.capture.requests())
				r = f.send(t, v, http.MethodGet, proxyPath(gw.name, "/api/v1/namespaces/default/pods/demo/exec?command=id&stdout=true"), []string{
					"Connection: Upgrade, " + hostile, "Upgrade: websocket", "Sec-WebSocket-Version: 13",
					"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Protocol: v5.channel.k8s.io",
				}, "")
				got = f.capture.since(n)
				if r.Code != http.StatusSwitchingProtocols || len(got) != 1 {
					t.Fatalf("%s upgrade: %d %s; the cluster received %d requests", gw.name, r.Code, r.Body, len(got))
				}
				f.wantIdentity(t, got[0], gw.caller)
				if c := got[0].Header.Values("Connection"); len(c) != 1 || !strings.EqualFold(c[0], "upgrade") {
					t.Errorf("%s upgrade: Connection at the cluster = %q, want only Upgrade", gw.name, c)
				}
			}
		})
	}
}

// 1b. HTTP/2 has no hop-by-hop headers: a client that sends one anyway is
// refused by the gateway's HTTP/2 server (a malformed request: 400 or a
// stream reset), and the cluster hears nothing.
func (f *securityFixture) testHTTP2ConnectionHeader(t *testing.T) {
	n := len(f.capture.requests())
	conn, err := tls.Dial("tcp", hostOf(env.Gateway.URL), &tls.Config{
		MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}, RootCAs: poolOf(f.gwCA), ServerName: "127.0.0.1",
		Certificates: []tls.Certificate{f.alice},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("negotiated %q, want h2", p)
	}
	_ = conn.SetDeadline(time.Now().Add(kubectlTimeout))
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, hf := range [][2]string{
		{":method", "GET"}, {":scheme", "https"}, {":authority", hostOf(env.Gateway.URL)},
		{":path", proxyPath(f.callerGW, "/api/v1/namespaces")},
		{"connection", "impersonate-user, authorization"}, {"impersonate-user", "system:admin"},
	} {
		_ = enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	refused := false
	for !refused {
		frame, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading HTTP/2 frames before the stream was refused: %v", err)
		}
		switch fm := frame.(type) {
		case *http2.SettingsFrame:
			if !fm.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.RSTStreamFrame:
			refused = fm.StreamID == 1 && fm.ErrCode == http2.ErrCodeProtocol
			if !refused {
				t.Fatalf("stream reset with %v, want PROTOCOL_ERROR", fm.ErrCode)
			}
		case *http2.HeadersFrame:
			var status string
			dec := hpack.NewDecoder(4096, func(hf hpack.HeaderField) {
				if hf.Name == ":status" {
					status = hf.Value
				}
			})
			_, _ = dec.Write(fm.HeaderBlockFragment())
			if fm.StreamID != 1 || status != "400" {
				t.Fatalf("the gateway answered a request with a connection header with status %s, want it refused (400 or a stream reset)", status)
			}
			refused = true
		case *http2.GoAwayFrame:
			refused = fm.ErrCode == http2.ErrCodeProtocol
			if !refused {
				t.Fatalf("GOAWAY %v", fm.ErrCode)
			}
		}
	}
	if got := f.capture.since(n); len(got) != 0 {
		t.Fatalf("the cluster received %d requests", len(got))
	}
}

// 7. Headers that carry the client's credentials or claimed identities
// (non-canonical spellings, the hub's front-proxy headers, the WebSocket
// bearer subprotocol) never reach the cluster, over HTTP/1.1 and HTTP/2.
func (f *securityFixture) testHeaderHygiene(t *testing.T) {
	wsToken := base64.RawURLEncoding.EncodeToString([]byte("alice-websocket-token"))
	// Canonical Impersonate-* headers are the hub's and the gateway's own
	// impersonation requests (their filters act on them and remove them);
	// spellings those filters do not know must not slip through either.
	hostile := []string{
		"Impersonate_User: root", "Impersonate_Group: system:masters", "IMPERSONATE_UID: 0", "impersonate_extra_scopes: all",
		"X-Remote-User: mallory", "X-Remote-Group: system:masters", "X_Remote_Extra_Scopes: all",
		"Cookie: session=alice", "Proxy-Authorization: Basic bWFsbG9yeTpwdw==",
		"Sec-WebSocket-Protocol: base64url.bearer.authorization.k8s.io." + wsToken + ", v5.channel.k8s.io",
		"Accept: application/json",
	}
	leaked := []string{"root", "mallory", "system:masters", "session=alice", "bWFsbG9yeTpwdw", wsToken}
	check := func(t *testing.T, r capturedRequest) {
		f.wantIdentity(t, r, true)
		for k, vs := range r.Header {
			for _, v := range vs {
				for _, l := range leaked {
					if strings.Contains(v, l) {
						t.Errorf("the cluster received %s: %q, which carries the client's %q", k, v, l)
					}
				}
			}
		}
		if r.Header.Get("Accept") != "application/json" {
			t.Errorf("an ordinary header was lost: Accept = %q", r.Header.Get("Accept"))
		}
	}
	for _, v := range f.targets() {
		t.Run(v.name, func(t *testing.T) {
			n := len(f.capture.requests())
			r := f.send(t, v, http.MethodGet, proxyPath(f.callerGW, "/api/v1/pods"), append([]string{"Connection: close"}, hostile...), "")
			got := f.capture.since(n)
			if r.Code != http.StatusOK || len(got) != 1 {
				t.Fatalf("%d %s; the cluster received %d requests", r.Code, r.Body, len(got))
			}
			check(t, got[0])
		})
	}
	t.Run("direct/http2", func(t *testing.T) {
		client := &http.Client{Timeout: kubectlTimeout, Transport: &http.Transport{ForceAttemptHTTP2: true,
			TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: poolOf(f.gwCA), Certificates: []tls.Certificate{f.alice}}}}
		defer client.CloseIdleConnections()
		req, _ := http.NewRequest(http.MethodGet, env.Gateway.URL+proxyPath(f.callerGW, "/api/v1/pods"), nil)
		for _, h := range hostile {
			k, val, _ := strings.Cut(h, ": ")
			req.Header[k] = append(req.Header[k], val) // as written, not canonicalized
		}
		n := len(f.capture.requests())
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got := f.capture.since(n)
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 || len(got) != 1 {
			t.Fatalf("%d over %s; the cluster received %d requests", resp.StatusCode, resp.Proto, len(got))
		}
		check(t, got[0])
	})
}

// 2. A user who may update ClusterGateways but not read Secrets can neither
// point the stored credential elsewhere nor widen whom it acts for.
func (f *securityFixture) testWritersCannotRedirect(t *testing.T) {
	mallory := newHubUser(t, "mallory")
	role := uniqueName(t, "gateway-writer")
	bind(t, "clusterrole", role, "--verb=get,list,watch,update,patch", "--resource=clustergateways.gateway.clustergateway.io")
	bind(t, "clusterrolebinding", role, "--clusterrole="+role, "--user="+mallory.Name)
	if r := kubectl(t, mallory.Kubeconfig, nil, "", "auth", "can-i", "get", "secrets", "-n", localenv.GatewayNamespace); strings.TrimSpace(r.Stdout) != "no" {
		t.Fatalf("mallory may read the gateway's Secrets (%q): the test would prove nothing", r.Stdout)
	}
	evil := startCapture(t)
	refused := []struct {
		name, patch string
		fields      []string
	}{
		{"address", fmt.Sprintf(`{"spec":{"endpoint":{"address":%q,"caBundle":%q}}}`, evil.URL, base64.StdEncoding.EncodeToString(evil.CAPEM)),
			[]string{"spec.endpoint.address", "spec.endpoint.caBundle", "spec.credential.bearerToken"}},
		{"insecure", `{"spec":{"endpoint":{"caBundle":null,"insecureSkipTLSVerify":true}}}`,
			[]string{"spec.endpoint.insecureSkipTLSVerify", "spec.credential.bearerToken"}},
		{"serverName", `{"spec":{"endpoint":{"serverName":"evil.example"}}}`, []string{"spec.endpoint.serverName"}},
		{"proxy", `{"spec":{"endpoint":{"proxyURL":"http://` + localenv.ForwardProxyIP + `:1"}}}`, []string{"spec.endpoint.proxyURL"}},
		{"endpoint type", `{"spec":{"endpoint":{"type":"Konnectivity"}}}`, []string{"spec.endpoint.type"}},
	}
	for _, tc := range refused {
		r := kubectl(t, mallory.Kubeconfig, nil, "", "patch", "clustergateway", f.tokenGW, "--type=merge", "-p", tc.patch)
		if r.Err == nil || !strings.Contains(r.Stderr, "is invalid") {
			t.Fatalf("mallory's %s change was not refused with 422: err=%v stdout=%s stderr=%s", tc.name, r.Err, r.Stdout, r.Stderr)
		}
		for _, field := range tc.fields {
			if !strings.Contains(r.Stderr, field) {
				t.Errorf("the refusal of the %s change does not name %s: %s", tc.name, field, r.Stderr)
			}
		}
	}
	r := kubectl(t, mallory.Kubeconfig, nil, "", "patch", "clustergateway", f.callerGW, "--type=merge", "-p", `{"spec":{"impersonation":{"mode":"None"}}}`)
	if r.Err == nil || !strings.Contains(r.Stderr, "spec.impersonation.mode") {
		t.Fatalf("mallory switched a Caller gateway to act as its stored credential: err=%v %s", r.Err, r.Stderr)
	}
	// Nothing moved: the gateway still sends its token to its own cluster.
	n := len(f.capture.requests())
	if code, body := hubGet(t, proxyPath(f.tokenGW, "/api")); code != http.StatusOK {
		t.Fatalf("the gateway stopped working after refused updates: %d %s", code, body)
	}
	f.wantIdentity(t, f.capture.since(n)[0], false)

	// What does not move the credential is allowed, and keeps it.
	mustKubectl(t, mallory.Kubeconfig, "label", "clustergateway", f.tokenGW, "team=blue")
	n = len(f.capture.requests())
	if code, body := hubGet(t, proxyPath(f.tokenGW, "/api")); code != http.StatusOK {
		t.Fatalf("after a label change: %d %s", code, body)
	}
	f.wantIdentity(t, f.capture.since(n)[0], false)

	// A writer who brings a credential of her own may move the gateway: the
	// new endpoint receives her token, never the stored one.
	hers := randomToken(t)
	mustKubectl(t, mallory.Kubeconfig, "patch", "clustergateway", f.tokenGW, "--type=merge", "-p",
		fmt.Sprintf(`{"spec":{"endpoint":{"address":%q,"caBundle":%q},"credential":{"bearerToken":%q}}}`, evil.URL, base64.StdEncoding.EncodeToString(evil.CAPEM), hers))
	eventually(t, "the moved gateway to reach the new endpoint", func() error {
		if code, body := hubGet(t, proxyPath(f.tokenGW, "/api")); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	for _, req := range evil.requests() {
		if a := req.Header.Get("Authorization"); a != "Bearer "+hers {
			t.Fatalf("the new endpoint received Authorization %q, want mallory's own token", a)
		}
	}
	// Put it back for the other subtests.
	mustKubectl(t, env.Hub.Kubeconfig, "patch", "clustergateway", f.tokenGW, "--type=merge", "-p",
		fmt.Sprintf(`{"spec":{"endpoint":{"address":%q,"caBundle":%q},"credential":{"bearerToken":%q}}}`, f.capture.URL, base64.StdEncoding.EncodeToString(f.capture.CAPEM), f.token))
	eventually(t, "the gateway back at the capture", func() error {
		n := len(f.capture.requests())
		if code, body := hubGet(t, proxyPath(f.tokenGW, "/api")); code != http.StatusOK || len(f.capture.since(n)) != 1 {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
}

// newHubUser makes a hub user with a client certificate and a kubeconfig.
func newHubUser(t *testing.T, prefix string) *localenv.User {
	t.Helper()
	u, err := env.NewUser(uniqueName(t, prefix))
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// 4. Exec, attach and port-forward over WebSocket are GETs; they need create
// on clustergateways/proxy all the same.
func (f *securityFixture) testUpgradesNeedCreate(t *testing.T) {
	reader := newHubUser(t, "proxy-reader")
	bind(t, "clusterrolebinding", uniqueName(t, "reader"), "--clusterrole=cluster-gateway:proxy-reader", "--user="+reader.Name)
	cert, err := tls.X509KeyPair(reader.Cert.CertPEM, reader.Cert.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	upgrade := []string{"Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13",
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Protocol: v5.channel.k8s.io"}
	for _, sub := range []string{"/api/v1/namespaces/default/pods/demo/exec?command=id&stdout=true", "/api/v1/namespaces/default/pods/demo/attach?stdout=true", "/api/v1/namespaces/default/pods/demo/portforward?ports=80"} {
		for _, v := range f.targets() {
			n := len(f.capture.requests())
			req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n\r\n", proxyPath(f.tokenGW, sub), v.addr, strings.Join(upgrade, "\r\n"))
			r := rawRequest(t, v.addr, v.ca, &cert, req)
			if r.Code != http.StatusForbidden || !strings.Contains(r.Body, "need create") {
				t.Errorf("%s %s as a proxy reader: %d %s, want 403 saying create is needed", v.name, sub, r.Code, r.Body)
			}
			if got := f.capture.since(n); len(got) != 0 {
				t.Errorf("%s %s: the cluster received %d requests", v.name, sub, len(got))
			}
		}
	}
	// Reading still works for the reader, and exec for a user with create.
	n := len(f.capture.requests())
	r := rawRequest(t, hostOf(env.Hub.URL), f.hubCA, &cert, fmt.Sprintf("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", proxyPath(f.tokenGW, "/api/v1/pods")))
	if r.Code != http.StatusOK || len(f.capture.since(n)) != 1 {
		t.Fatalf("a proxy reader's GET: %d %s", r.Code, r.Body)
	}
	n = len(f.capture.requests())
	r = f.send(t, f.targets()[1], http.MethodGet, proxyPath(f.tokenGW, "/api/v1/namespaces/default/pods/demo/exec?command=id&stdout=true"), upgrade, "")
	if r.Code != http.StatusSwitchingProtocols || len(f.capture.since(n)) != 1 {
		t.Fatalf("exec by a user with create: %d %s", r.Code, r.Body)
	}
	// kubectl exec (WebSocket first) against a real cluster tells the reader why.
	kc := proxyKubeconfig(t, reader, env.Managed[0].GatewayName)
	res := kubectl(t, kc, streamProtocols[0].Env, "", "exec", "demo", "--", "hostname")
	if res.Err == nil || !strings.Contains(res.Stderr, "create") || strings.Contains(res.Stdout, env.Managed[0].Name) {
		t.Fatalf("kubectl exec as a proxy reader: err=%v stdout=%q stderr=%s; want it refused for lack of create", res.Err, res.Stdout, res.Stderr)
	}
}

// proxyKubeconfig writes a kubeconfig for user u whose server is the
// gateway's proxy URL of cluster name through the hub.
func proxyKubeconfig(t *testing.T, u *localenv.User, name string) string {
	t.Helper()
	return kubeconfigFile(t, "", env.Hub.URL+proxyPath(name, ""), env.Hub.CA.CertPEM,
		&clientcmdapi.AuthInfo{ClientCertificateData: u.Cert.CertPEM, ClientKeyData: u.Cert.KeyPEM})
}

// 5. A proxy URL's user name and password are write-only like the rest of
// the material.
func (f *securityFixture) testProxyCredentials(t *testing.T) {
	const user, pass = "proxy-user-e2e", "proxy-pass-e2e-5e3c"
	name := uniqueName(t, "sec-proxycred")
	gw := directGateway(name, 0)
	gw.Spec.Endpoint.ProxyURL = "http://" + user + ":" + pass + "@" + env.HTTPProxy.URL.Host
	createGateway(t, gw)
	if code, body := hubGet(t, proxyPath(name, "/api")); code != http.StatusOK {
		t.Fatalf("a request through the authenticated proxy URL: %d %s", code, body)
	}
	for _, args := range [][]string{{"get", "clustergateway", name, "-o", "json"}, {"get", "clustergateway", name, "-o", "wide"}, {"get", "clustergateways", "-o", "yaml"}} {
		out := mustKubectl(t, env.Bob.Kubeconfig, args...)
		if strings.Contains(out, pass) || strings.Contains(out, user) {
			t.Fatalf("a viewer's %v shows the proxy's credentials:\n%s", args, out)
		}
	}
	out := mustKubectl(t, env.Bob.Kubeconfig, "get", "clustergateway", name, "-o", "jsonpath={.spec.endpoint.proxyURL}")
	if out != env.HTTPProxy.URL.String() {
		t.Fatalf("proxyURL as read = %q, want %q (without user info)", out, env.HTTPProxy.URL.String())
	}
	// A read-modify-write keeps them; the Secret still has them.
	mustKubectl(t, env.Hub.Kubeconfig, "label", "clustergateway", name, "kept=yes")
	if s := mustSecret(t, name); !strings.Contains(string(s.Data["proxy-url"]), pass) {
		t.Fatalf("a label change dropped the proxy credentials: %q", s.Data["proxy-url"])
	}
	// An invalid proxy URL is refused without echoing the password.
	r := kubectl(t, env.Hub.Kubeconfig, nil, "", "patch", "clustergateway", name, "--type=merge", "-p",
		`{"spec":{"endpoint":{"proxyURL":"ftp://`+user+`:`+pass+`@`+env.HTTPProxy.URL.Host+`"},"credential":{"x509":`+x509JSON(gw)+`}}}`)
	if r.Err == nil || strings.Contains(r.Stderr, pass) || !strings.Contains(r.Stderr, "proxyURL") {
		t.Fatalf("an ftp proxy URL: err=%v stderr=%s; want 422 naming proxyURL without the password", r.Err, r.Stderr)
	}
}

func x509JSON(gw *gatewayv1alpha1.ClusterGateway) string {
	b, _ := json.Marshal(gw.Spec.Credential.X509)
	return string(b)
}

// 6. Paths with relative or empty segments are refused before anything is sent.
func (f *securityFixture) testPaths(t *testing.T) {
	for _, sub := range []string{
		"/api/v1/namespaces/default/../kube-system/secrets",
		"/api/v1/namespaces/default/%2e%2e/kube-system/secrets",
		"/api/./v1/pods",
		"/api//v1/pods",
		"/api/v1/namespaces/default/pods/%2E%2E",
	} {
		for _, v := range f.targets() {
			n := len(f.capture.requests())
			r := f.send(t, v, http.MethodGet, proxyPath(f.tokenGW, sub), []string{"Connection: close"}, "")
			if r.Code != http.StatusBadRequest || !strings.Contains(r.Body, "segment") {
				t.Errorf("%s %s: %d %s, want 400 naming the segment", v.name, sub, r.Code, r.Body)
			}
			if got := f.capture.since(n); len(got) != 0 {
				t.Errorf("%s %s: the cluster received %v", v.name, sub, got[0].Path)
			}
		}
	}
}

// 8. Material that cannot work is refused when written, not stored as a
// gateway that is Ready and then fails every request.
func (f *securityFixture) testBadMaterial(t *testing.T) {
	c := gatewayClient(t, env.Hub.Kubeconfig).GatewayV1alpha1().ClusterGateways()
	ca := testpki.MustCA(t, "bad-material-ca")
	issue := func(s testpki.Spec) *gatewayv1alpha1.X509Credential {
		p := ca.MustIssue(t, s)
		return &gatewayv1alpha1.X509Credential{Certificate: p.CertPEM, PrivateKey: p.KeyPEM}
	}
	other := issue(testpki.Spec{CommonName: "other", Client: true})
	mismatched := issue(testpki.Spec{CommonName: "gateway", Client: true})
	mismatched.PrivateKey = other.PrivateKey
	for _, tc := range []struct {
		name  string
		cred  gatewayv1alpha1.Credential
		field string
		text  string
	}{
		{"token with a control character", gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialBearerToken, BearerToken: "zyx\x01wvu"}, "spec.credential.bearerToken", "control characters"},
		{"token with a space", gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialBearerToken, BearerToken: "zyx wvu"}, "spec.credential.bearerToken", "without spaces"},
		{"key of another certificate", gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialX509Certificate, X509: mismatched}, "spec.credential.x509", "not a usable pair"},
		{"expired certificate", gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialX509Certificate, X509: issue(testpki.Spec{CommonName: "gateway", Client: true,
			NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})}, "spec.credential.x509.certificate", "expired"},
		{"certificate not valid yet", gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialX509Certificate, X509: issue(testpki.Spec{CommonName: "gateway", Client: true,
			NotBefore: time.Now().Add(time.Hour), NotAfter: time.Now().Add(2 * time.Hour)})}, "spec.credential.x509.certificate", "not valid before"},
		{"server-only certificate", gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialX509Certificate, X509: issue(testpki.Spec{CommonName: "gateway", Server: true})}, "spec.credential.x509.certificate", "clientAuth"},
	} {
		name := uniqueName(t, "sec-bad")
		gw := directGateway(name, 0)
		gw.Spec.Credential = tc.cred
		_, err := c.Create(context.Background(), gw, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: %v; want 422 naming %s and saying %q", tc.name, err, tc.field, tc.text)
		}
		if err == nil {
			_ = c.Delete(context.Background(), name, metav1.DeleteOptions{})
		} else if strings.Contains(err.Error(), "zyx") || strings.Contains(err.Error(), "wvu") {
			// Not hex: the gateway's name (a hex suffix) is in the message.
			t.Errorf("%s: the refusal echoes the token: %v", tc.name, err)
		}
		requireNoSecret(t, name)
	}
}

// 9. A cluster's redirect is not passed on.
func (f *securityFixture) testRedirects(t *testing.T) {
	f.capture.setRedirect("https://login.example/authorize?code=e2e-secret-code")
	defer f.capture.setRedirect("")
	for _, v := range f.targets() {
		r := f.send(t, v, http.MethodGet, proxyPath(f.tokenGW, "/api/v1/pods"), []string{"Connection: close"}, "")
		if r.Code != http.StatusBadGateway || r.Header.Get("Location") != "" || !strings.Contains(r.Body, "redirect") || strings.Contains(r.Body, "e2e-secret-code") {
			t.Errorf("%s: %d Location=%q %s; want 502 saying the redirect is not passed on, without its query", v.name, r.Code, r.Header.Get("Location"), r.Body)
		}
		r = f.send(t, v, http.MethodGet, proxyPath(f.tokenGW, "/api/v1/namespaces/default/pods/demo/exec?command=id"), []string{
			"Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
		}, "")
		if r.Code != http.StatusBadGateway || r.Header.Get("Location") != "" {
			t.Errorf("%s upgrade: %d Location=%q %s; want 502", v.name, r.Code, r.Header.Get("Location"), r.Body)
		}
	}
}

// 10. The gateway's labels and annotations stay in its own encoding: the
// Secret carries none of them for controllers to act on.
func (f *securityFixture) testSecretMetadata(t *testing.T) {
	name := uniqueName(t, "sec-meta")
	gw := directGateway(name, 0)
	gw.Labels = map[string]string{"argocd.argoproj.io/secret-type": "cluster", "sec-e2e": name}
	gw.Annotations = map[string]string{"reflector.v1.k8s.emberstack.com/reflection-allowed": "true", "replicator.v1.mittwald.de/replicate-to": "*"}
	createGateway(t, gw)
	s := mustSecret(t, name)
	if len(s.Annotations) != 0 || len(s.Labels) != 1 || s.Labels["gateway.clustergateway.io/cluster-gateway"] != "true" {
		t.Fatalf("the Secret carries caller metadata: labels %v annotations %v", s.Labels, s.Annotations)
	}
	if out := mustKubectl(t, env.Hub.Kubeconfig, "get", "secrets", "-A", "-l", "argocd.argoproj.io/secret-type=cluster", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Fatalf("a Secret with Argo CD's cluster label exists: %s", out)
	}
	// Selectors are served from the gateway's own labels, for list and watch.
	if out := mustKubectl(t, env.Hub.Kubeconfig, "get", "clustergateways", "-l", "sec-e2e="+name, "-o", "name"); strings.TrimSpace(out) != "clustergateway.gateway.clustergateway.io/"+name {
		t.Fatalf("list -l sec-e2e=%s: %q", name, out)
	}
	w := startKubectl(t, env.Hub.Kubeconfig, nil, "get", "clustergateways", "-l", "sec-e2e="+name, "-w", "--output-watch-events", "-o", "custom-columns=E:.type,N:.object.metadata.name", "--no-headers")
	w.waitLine(t, regexp.MustCompile(`^ADDED\s+`+name+`$`))
	mustKubectl(t, env.Hub.Kubeconfig, "label", "clustergateway", name, "sec-e2e=moved", "--overwrite")
	w.waitLine(t, regexp.MustCompile(`^DELETED\s+`+name+`$`))
	mustKubectl(t, env.Hub.Kubeconfig, "label", "clustergateway", name, "sec-e2e="+name, "--overwrite")
	w.waitLine(t, regexp.MustCompile(`^ADDED\s+`+name+`$`))
}

// 11. Where the gateway may connect: denied ranges are refused at write for
// IP literals, and at dial time after name resolution ("localhost" resolves
// into 127.0.0.1 and ::1, which the suite's gateway denies).
func (f *securityFixture) testEndpointPolicy(t *testing.T) {
	c := gatewayClient(t, env.Hub.Kubeconfig).GatewayV1alpha1().ClusterGateways()
	for _, tc := range []struct {
		name    string
		mutate  func(*gatewayv1alpha1.ClusterGateway)
		field   string
		address string
	}{
		{"metadata address", func(g *gatewayv1alpha1.ClusterGateway) { g.Spec.Endpoint.Address = "https://169.254.169.254" }, "spec.endpoint.address", "169.254.169.254"},
		{"IPv4-mapped metadata address", func(g *gatewayv1alpha1.ClusterGateway) {
			g.Spec.Endpoint.Address = "https://[::ffff:169.254.169.254]:443"
		}, "spec.endpoint.address", "169.254.169.254"},
		{"link-local IPv6", func(g *gatewayv1alpha1.ClusterGateway) { g.Spec.Endpoint.Address = "https://[fe80::1]:6443" }, "spec.endpoint.address", "fe80::1"},
		{"proxy in a denied range", func(g *gatewayv1alpha1.ClusterGateway) { g.Spec.Endpoint.ProxyURL = "http://169.254.169.254:3128" }, "spec.endpoint.proxyURL", "169.254.169.254"},
		{"konnectivity to metadata", func(g *gatewayv1alpha1.ClusterGateway) {
			g.Spec.Endpoint.Type, g.Spec.Endpoint.Address = gatewayv1alpha1.EndpointKonnectivity, "https://169.254.169.254"
		}, "spec.endpoint.address", "169.254.169.254"},
	} {
		name := uniqueName(t, "sec-policy")
		gw := directGateway(name, 0)
		tc.mutate(gw)
		_, err := c.Create(context.Background(), gw, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), "endpoint policy") || !strings.Contains(err.Error(), tc.address) {
			t.Errorf("%s: %v; want 422 naming %s, the policy and %s", tc.name, err, tc.field, tc.address)
		}
		requireNoSecret(t, name)
	}
	// A name that resolves into a denied range: refused when dialed. The
	// capture listens where "localhost" leads, so a broken policy would show.
	local := startCaptureAt(t, "127.0.0.1")
	_, port, _ := net.SplitHostPort(hostOf(local.URL))
	name := uniqueName(t, "sec-localhost")
	gw := f.captureGateway(name, local, f.token)
	gw.Spec.Endpoint.Address = "https://localhost:" + port
	createGateway(t, gw)
	code, body := hubGet(t, proxyPath(name, "/api"))
	if code != http.StatusForbidden || !strings.Contains(body, "endpoint policy") || !strings.Contains(body, "127.0.0.1") {
		t.Fatalf("a gateway at localhost: %d %s; want 403 naming the policy and the resolved address", code, body)
	}
	if got := local.requests(); len(got) != 0 {
		t.Fatalf("the denied address received %d requests", len(got))
	}
}

// 3. No token, private key or client credential in any log of the
// environment, with the gateway at -v=10 (where client-go logs request and
// response bodies and the upgrade proxy its headers), under traffic through
// a BearerToken gateway and a Caller gateway: ordinary requests, a watch, an
// upgrade, the health subresource, writes carrying material, and a caller
// that authenticates to the gateway with a bearer token of its own, also
// through a gateway of every kind (gatewayKinds), where that caller's
// cookies and front-proxy headers must not reach the cluster either and
// the cluster must serve exactly the gateway's identity.
func TestSecurityNoCredentialsInLogs(t *testing.T) {
	requireGateway(t)
	kinds := newGatewayKinds(t)
	restartGateway(t, append(slices.Clone(gatewayArgs), "--v=10", "--credential-providers-file="+kinds.ProvidersFile))
	restored := false
	t.Cleanup(func() {
		if !restored {
			restartGateway(t, nil)
		}
	})
	f := newSecurityFixture(t)

	// Material that appears nowhere else: a token gateway with a proxy
	// password, and an X.509 Caller gateway to a real cluster.
	tokenGW := uniqueName(t, "log-token")
	proxyPass := "log-proxy-pass-" + randomToken(t)[10:26]
	tok := f.captureGateway(tokenGW, f.capture, randomToken(t))
	createGateway(t, tok)
	x509GW := uniqueName(t, "log-x509")
	real := directGateway(x509GW, 0)
	real.Spec.Credential.X509 = newClientCert(t, env.Managed[0].CA)
	real.Spec.Impersonation.Mode = gatewayv1alpha1.ImpersonationCaller
	real.Spec.Endpoint.ProxyURL = "http://u:" + proxyPass + "@" + env.HTTPProxy.URL.Host
	createGateway(t, real)
	// A credential read from a hub Secret, rotated once: both tokens only
	// ever travel in the Secret and to the cluster.
	srcTokens := []string{randomToken(t), randomToken(t)}
	srcGW := uniqueName(t, "log-src")
	src := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: srcGW + "-creds"}, Data: map[string][]byte{"token": []byte(srcTokens[0]), "ca.crt": f.capture.CAPEM}}
	putSourceSecret(t, hubAdmin(t), src)
	createGateway(t, secretRefGateway(srcGW, src.Name, f.capture.URL, nil))
	// The caller's own bearer token: a hub ServiceAccount allowed to use the proxy.
	sa := uniqueName(t, "log-caller")
	mustKubectl(t, env.Hub.Kubeconfig, "create", "serviceaccount", sa, "-n", "default")
	t.Cleanup(func() { _ = kubectl(t, env.Hub.Kubeconfig, nil, "", "delete", "serviceaccount", sa, "-n", "default") })
	bind(t, "clusterrolebinding", sa, "--clusterrole=cluster-gateway:proxy", "--serviceaccount=default:"+sa)
	callerToken := strings.TrimSpace(mustKubectl(t, env.Hub.Kubeconfig, "create", "token", sa, "-n", "default"))
	saUID := strings.TrimSpace(mustKubectl(t, env.Hub.Kubeconfig, "get", "serviceaccount", sa, "-n", "default", "-o", "jsonpath={.metadata.uid}"))
	kinds.createGateways(t)

	// Traffic, through the hub and straight to the gateway.
	for _, gw := range []string{tokenGW, x509GW, srcGW} {
		eventually(t, "a request through "+gw, func() error {
			if code, body := hubGet(t, proxyPath(gw, "/api/v1/namespaces/default/pods")); code != http.StatusOK {
				return fmt.Errorf("%d %s", code, body)
			}
			return nil
		})
		hubGet(t, "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/"+gw+"/health")
		_ = f.send(t, f.targets()[1], http.MethodGet, proxyPath(gw, "/api/v1/namespaces/default/pods/demo/exec?command=id&stdout=true"), []string{
			"Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
			"Sec-WebSocket-Protocol: v5.channel.k8s.io, base64url.bearer.authorization.k8s.io." + base64.RawURLEncoding.EncodeToString([]byte(callerToken)),
		}, "")
	}
	mustKubectl(t, env.Hub.Kubeconfig, "get", "--raw", proxyPath(x509GW, "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1"))
	src.Data["token"] = []byte(srcTokens[1])
	putSourceSecret(t, hubAdmin(t), src)
	eventually(t, "a request with the rotated source token", func() error {
		n := len(f.capture.requests())
		if code, body := hubGet(t, proxyPath(srcGW, "/api")); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		if got := f.capture.since(n); len(got) == 0 || got[0].Header.Get("Authorization") != "Bearer "+srcTokens[1] {
			return fmt.Errorf("the cluster did not see the rotated token")
		}
		return nil
	})
	// A direct caller with a bearer token: the gateway asks the hub (TokenReview).
	r := rawRequest(t, hostOf(env.Gateway.URL), f.gwCA, nil, fmt.Sprintf("GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n",
		proxyPath(tokenGW, "/api"), callerToken))
	if r.Code != http.StatusOK {
		t.Fatalf("a bearer-token caller straight to the gateway: %d %s", r.Code, r.Body)
	}
	t.Run("a bearer-token caller straight to the gateway, through every kind of gateway", func(t *testing.T) {
		kinds.checkDirectBearerCaller(t, callerToken, saUser(sa), saUID)
	})
	// A write that carries material: the informer lists, the write sends and
	// receives the Secret.
	mustKubectl(t, env.Hub.Kubeconfig, "label", "clustergateway", x509GW, "logged=yes")
	restartGateway(t, nil) // stop the -v=10 gateway: its log is complete
	restored = true

	logs, err := filepath.Glob(filepath.Join(env.StateDir, "logs", "*"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("no logs under %s: %v", env.StateDir, err)
	}
	gatewayLog, err := os.ReadFile(filepath.Join(env.StateDir, "logs", "cluster-gateway.log"))
	if err != nil {
		t.Fatal(err)
	}
	// Prove the gateway did log at the verbosities that matter.
	for _, want := range []string{`"Response Body"`, `"Request Body"`, "Connecting to backend proxy"} {
		if !bytes.Contains(gatewayLog, []byte(want)) {
			t.Fatalf("the gateway's log has no %q: it did not run at -v=10, and this test would prove nothing", want)
		}
	}
	needles := map[string]string{
		"the token gateway's token": tok.Spec.Credential.BearerToken,
		"the caller's bearer token": callerToken,
		"the proxy password":        proxyPass,
		"the source's first token":  srcTokens[0],
		"the source's second token": srcTokens[1],
	}
	for i, n := range secretNeedles(append(kinds.material(), []byte(tok.Spec.Credential.BearerToken), []byte(callerToken), real.Spec.Credential.X509.PrivateKey)...) {
		needles[fmt.Sprintf("material form %d", i)] = n
	}
	needles["the caller's token, base64url"] = base64.RawURLEncoding.EncodeToString([]byte(callerToken))
	// Protobuf bodies are logged as hex dumps, 16 bytes a line: look for
	// every 12-byte window of the random tokens and of the key's base64 body.
	for name, secret := range map[string]string{"token": tok.Spec.Credential.BearerToken[10:], "proxy password": proxyPass[15:], "key": pemBody(real.Spec.Credential.X509.PrivateKey),
		"source token 1": srcTokens[0][10:], "source token 2": srcTokens[1][10:]} {
		for i := 0; i+12 <= len(secret); i++ {
			needles[fmt.Sprintf("%s window %d", name, i)] = secret[i : i+12]
		}
	}
	for _, path := range logs {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for what, n := range needles {
			if i := bytes.Index(b, []byte(n)); i >= 0 {
				start := max(0, i-200)
				t.Errorf("%s contains %s: …%s…", filepath.Base(path), what, b[start:min(len(b), i+len(n)+50)])
			}
		}
	}
}

// pemBody is the base64 text of a PEM block, without its armour and newlines.
func pemBody(p []byte) string {
	var b strings.Builder
	for _, line := range strings.Split(string(p), "\n") {
		if !strings.HasPrefix(line, "-----") {
			b.WriteString(line)
		}
	}
	return b.String()
}
