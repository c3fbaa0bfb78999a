package pool

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	utilproxy "k8s.io/apimachinery/pkg/util/proxy"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
)

// Ordinary requests use h2; the upgrade transport negotiates HTTP/1.1 over
// the same tracked dialer.
func TestTransportProtocols(t *testing.T) {
	u := newUpstream(t)
	p := newTestPool(t, Config{})
	l := acquire(t, p, u.target(t, "c1", "client-1"))
	defer l.Release()

	resp, body := mustGet(t, l.Transport(), u.url, "/hello")
	if resp.ProtoMajor != 2 || resp.TLS.NegotiatedProtocol != "h2" || body != "HTTP/2.0 client-1" {
		t.Errorf("ordinary request: %s alpn %q body %q, want h2", resp.Proto, resp.TLS.NegotiatedProtocol, body)
	}
	resp, body = mustGet(t, l.UpgradeTransport(), u.url, "/hello")
	if resp.ProtoMajor != 1 || resp.TLS.NegotiatedProtocol != "http/1.1" || body != "HTTP/1.1 client-1" {
		t.Errorf("upgrade transport: %s alpn %q body %q, want http/1.1", resp.Proto, resp.TLS.NegotiatedProtocol, body)
	}
	if got := l.UpgradeTransport().TLSClientConfig; got == l.Transport().(spread).e.rt.TLSClientConfig || strings.Contains(strings.Join(got.NextProtos, ","), "h2") {
		t.Errorf("upgrade TLS config is shared or offers h2: %v", got.NextProtos)
	}
	if st := p.Stats(); st.OpenConns != 2 {
		t.Errorf("open conns %d, want 2 (one per protocol)", st.OpenConns)
	}

	// UpgradeAwareHandler dials through DialURL, which reads DialContext and
	// TLSClientConfig off the transport: the connection must be tracked and
	// verified like any other.
	before := p.Stats().Dials
	conn, err := utilproxy.DialURL(context.Background(), u.url, l.UpgradeTransport())
	if err != nil {
		t.Fatalf("DialURL: %v", err)
	}
	if tc, ok := conn.(*tls.Conn); !ok || tc.ConnectionState().NegotiatedProtocol != "http/1.1" {
		t.Errorf("DialURL gave %T, want TLS with http/1.1", conn)
	}
	if st := p.Stats(); st.Dials != before+1 || st.OpenConns != 3 {
		t.Errorf("DialURL: dials %d open %d, want it dialed and tracked", st.Dials-before, st.OpenConns)
	}
	conn.Close()
	eventually(t, "DialURL connection untracked on close", func() bool { return p.Stats().OpenConns == 2 })
}

// An exec-like upgrade through UpgradeAwareHandler using the upgrade
// transport reaches the upstream over HTTP/1.1 and carries raw bytes.
func TestUpgradeAwareHandler(t *testing.T) {
	u := newUpstream(t)
	p := newTestPool(t, Config{})
	tg := u.target(t, "c1", "client-1")
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l, err := p.Acquire(tg)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		defer l.Release()
		loc := *u.url
		loc.Path = r.URL.Path
		h := utilproxy.NewUpgradeAwareHandler(&loc, l.UpgradeTransport(), false, true, errorResponder{})
		h.ServeHTTP(w, r)
	}))
	defer front.Close()

	conn, err := net.Dial("tcp", front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /upgrade HTTP/1.1\r\nHost: front\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("upgrade: %s %s", resp.Status, b)
	}
	if _, err := io.WriteString(conn, "ping\n"); err != nil {
		t.Fatal(err)
	}
	line, err := br.ReadString('\n')
	if err != nil || line != "ping\n" {
		t.Fatalf("echo: %q %v", line, err)
	}
	if st := p.Stats(); st.ActiveStreams != 1 || st.OpenConns != 1 {
		t.Errorf("during upgrade: active %d open %d, want 1 and 1", st.ActiveStreams, st.OpenConns)
	}
	conn.Close()
	eventually(t, "upgraded stream to end", func() bool {
		st := p.Stats()
		return st.ActiveStreams == 0 && st.OpenConns == 0
	})
}

type errorResponder struct{}

func (errorResponder) Error(w http.ResponseWriter, _ *http.Request, err error) {
	http.Error(w, err.Error(), http.StatusBadGateway)
}

// Failed dials are counted and say which cluster; the transport refuses to
// carry the cluster's credentials to another address.
func TestDialFailuresAndAddressGuard(t *testing.T) {
	u := newUpstream(t)
	p := newTestPool(t, Config{})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := *u.url
	dead.Host = ln.Addr().String()
	ln.Close() // nothing listens there now
	tg := u.target(t, "down", "client")
	tg.Address = &dead
	l := acquire(t, p, tg)
	_, _, err = get(context.Background(), l.Transport(), &dead, "/hello")
	l.Release()
	if err == nil || !strings.Contains(err.Error(), `cluster "down"`) {
		t.Errorf("dial to closed port: %v, want an error naming the cluster", err)
	}
	if st := p.Stats(); st.Dials != 1 || st.DialFailures != 1 || st.OpenConns != 0 {
		t.Errorf("dials %d failures %d open %d, want 1 1 0", st.Dials, st.DialFailures, st.OpenConns)
	}

	l = acquire(t, p, u.target(t, "up", "client"))
	defer l.Release()
	_, _, err = get(context.Background(), l.Transport(), &dead, "/hello")
	if err == nil || !strings.Contains(err.Error(), "only dials") {
		t.Errorf("request to a foreign address: %v, want refused", err)
	}
}

// The upstream's certificate is verified against the target's CA and server
// name; Insecure is an explicit opt-out.
func TestUpstreamCertificateVerified(t *testing.T) {
	u := newUpstream(t)
	p := newTestPool(t, Config{})
	for name, tc := range map[string]struct {
		mutate func(*Target)
		ok     bool
	}{
		"right CA":          {func(*Target) {}, true},
		"other CA":          {func(tg *Target) { tg.CAData = testpki.MustCA(t, "other").CertPEM }, false},
		"wrong server name": {func(tg *Target) { tg.ServerName = "wrong.example" }, false},
		"insecure":          {func(tg *Target) { tg.CAData, tg.Insecure = nil, true }, true},
	} {
		t.Run(name, func(t *testing.T) {
			tg := u.target(t, "verify-"+name, "client")
			tc.mutate(tg)
			l := acquire(t, p, tg)
			defer l.Release()
			for _, rt := range []http.RoundTripper{l.Transport(), l.UpgradeTransport()} {
				_, _, err := get(context.Background(), rt, u.url, "/hello")
				var verr *tls.CertificateVerificationError
				switch {
				case tc.ok && err != nil:
					t.Errorf("%T: %v", rt, err)
				case !tc.ok && !errors.As(err, &verr):
					t.Errorf("%T: %v, want a certificate verification error", rt, err)
				}
			}
		})
	}
}

// A pooled entry keeps its TLS material as the Target gave it, not parsed:
// no CA pool and no parsed client certificate for its life (they were a
// tenth of a pooled entry's memory), and no HTTP/1.1 transport until an
// upgrade asks for one. Connections still verify the server and present
// the client certificate (TestUpstreamCertificateVerified,
// TestTransportProtocols).
func TestEntryKeepsNoParsedTLSMaterial(t *testing.T) {
	u := newUpstream(t)
	p := newTestPool(t, Config{})
	l := acquire(t, p, u.target(t, "c1", "client-1"))
	defer l.Release()
	if _, body := mustGet(t, l.Transport(), u.url, "/hello"); body != "HTTP/2.0 client-1" {
		t.Fatalf("body %q, want the client certificate's name over h2", body)
	}
	e := l.e
	if e.tls.base.RootCAs != nil || e.tls.first.Load() != nil || len(e.tls.base.Certificates) != 1 || e.tls.base.Certificates[0].Leaf != nil {
		t.Errorf("the entry keeps a parsed CA pool (%v) or client certificate", e.tls.base.RootCAs != nil)
	}
	if e.rt.TLSClientConfig != nil && (e.rt.TLSClientConfig.RootCAs != nil || len(e.rt.TLSClientConfig.Certificates) > 0) {
		t.Error("the ordinary transport's unused TLSClientConfig holds TLS material")
	}
	if e.upgrade.Load() != nil {
		t.Error("an HTTP/1.1 transport was built before any upgrade")
	}
	up := l.UpgradeTransport()
	if up == nil || up != l.UpgradeTransport() || up.TLSClientConfig.RootCAs == nil {
		t.Error("the upgrade transport is not built once, with the CA bundle parsed")
	}
}

// The CA bundle parsed per handshake is the entry's own copy: a caller that
// changes its Target's buffers after Acquire cannot change whom the entry's
// connections trust.
func TestEntryTrustSurvivesTheCallersBuffers(t *testing.T) {
	u := newUpstream(t)
	p := newTestPool(t, Config{})
	tg := u.target(t, "c1", "client-1")
	l := acquire(t, p, tg)
	defer l.Release()
	other := testpki.MustCA(t, "other").CertPEM
	copy(tg.CAData, other) // in place; the dials below come after it
	for _, rt := range []http.RoundTripper{l.Transport(), l.UpgradeTransport()} {
		if _, _, err := get(context.Background(), rt, u.url, "/hello"); err != nil {
			t.Errorf("%T after the caller's CA buffer changed: %v", rt, err)
		}
	}
}

// A pooled connection tells the cluster, in its first SETTINGS, to keep its
// response-header table to decoderHeaderTableSize: the cluster's encoder
// may then index no more than that (RFC 7541 4.2), so the connection's
// decoder holds no more, however many unique Audit-Ids the cluster sends.
func TestConnectionsBoundTheClustersHeaderTable(t *testing.T) {
	serverCA, clientCA := testpki.MustCA(t, "server-ca"), testpki.MustCA(t, "client-ca")
	serving := serverCA.MustIssue(t, testpki.Spec{CommonName: "upstream", IPs: []string{"127.0.0.1"}, Server: true})
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{serving.TLS()}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan map[http2.SettingID]uint32, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		settings := map[http2.SettingID]uint32{}
		defer func() { got <- settings }()
		preface := make([]byte, len(http2.ClientPreface))
		if _, err := io.ReadFull(c, preface); err != nil || string(preface) != http2.ClientPreface {
			return
		}
		f, err := http2.NewFramer(io.Discard, c).ReadFrame()
		if sf, ok := f.(*http2.SettingsFrame); ok && err == nil {
			_ = sf.ForeachSetting(func(s http2.Setting) error { settings[s.ID] = s.Val; return nil })
		}
	}()

	client := clientCA.MustIssue(t, testpki.Spec{CommonName: "client", Client: true})
	u := &url.URL{Scheme: "https", Host: ln.Addr().String()}
	p := newTestPool(t, Config{Capacity: 2})
	l := acquire(t, p, &Target{Cluster: "c0", Address: u, CAData: serverCA.CertPEM, CertData: client.CertPEM, KeyData: client.KeyPEM})
	defer l.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u.String()+"/", nil)
	if resp, err := l.Transport().RoundTrip(req); err == nil {
		resp.Body.Close() // the listener answers nothing: an error is expected
	}
	settings := <-got
	if v, ok := settings[http2.SettingHeaderTableSize]; !ok || v != decoderHeaderTableSize {
		t.Fatalf("the connection's SETTINGS %v: header table size %d (sent: %v), want %d", settings, v, ok, decoderHeaderTableSize)
	}
}
