package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
	"github.com/clustergateway/cluster-gateway/internal/testpki"
)

// captureCluster is a TLS server in the test process that stands in for a
// managed cluster and records every request that reaches it, upgrades
// included: security tests assert what a cluster received, not only what
// the client was told. It listens on testIP.
type captureCluster struct {
	URL   string
	CAPEM []byte
	srv   *http.Server

	mu       sync.Mutex
	reqs     []capturedRequest
	redirect string       // when set, ordinary requests and upgrades are answered with a 302 there
	forward  http.Handler // when set (forwardTo), requests go on to a real cluster
}

type capturedRequest struct {
	Method, Path, RawQuery string
	Header                 http.Header
	// ClientCN is the common name of the client certificate the gateway
	// presented ("" for none): an X.509 gateway's identity.
	ClientCN string
}

func startCapture(t *testing.T) *captureCluster {
	t.Helper()
	return startCaptureAt(t, testIP)
}

// startCaptureAt is startCapture on another loopback address.
func startCaptureAt(t *testing.T, ip string) *captureCluster {
	t.Helper()
	ca := testpki.MustCA(t, "capture-ca-"+t.Name())
	serving := ca.MustIssue(t, testpki.Spec{CommonName: "capture", IPs: []string{ip}, DNSNames: []string{"localhost"}, Server: true})
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	c := &captureCluster{URL: "https://" + l.Addr().String(), CAPEM: ca.CertPEM}
	c.srv = &http.Server{
		Handler: http.HandlerFunc(c.serve),
		// Asked for, not required: a client certificate is recorded, and
		// relayTo presents the same identity to the real cluster.
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{serving.TLS()}, ClientAuth: tls.RequestClientCert},
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = c.srv.ServeTLS(l, "", "") }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.srv.Shutdown(ctx)
		_ = c.srv.Close()
	})
	return c
}

func (c *captureCluster) serve(w http.ResponseWriter, r *http.Request) {
	// The gateway's background prober reads /readyz and /version on its
	// own schedule; the tests assert what users' requests delivered.
	prober := strings.HasPrefix(r.UserAgent(), "cluster-gateway-prober/")
	c.mu.Lock()
	if !prober {
		c.reqs = append(c.reqs, capturedRequest{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: r.Header.Clone(), ClientCN: clientCN(r)})
	}
	redirect, forward := c.redirect, c.forward
	c.mu.Unlock()
	if prober {
		_, _ = fmt.Fprint(w, `{"gitVersion":"v0.0.0-capture"}`)
		return
	}
	if forward != nil {
		forward.ServeHTTP(w, r)
		return
	}
	if redirect != "" {
		http.Redirect(w, r, redirect, http.StatusFound)
		return
	}
	if r.Header.Get("Upgrade") != "" {
		// Switch protocols and hang up: the request is what matters.
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err == nil {
			fmt.Fprintf(buf, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", r.Header.Get("Upgrade"))
			_ = buf.Flush()
			_ = conn.Close()
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Success","message":"captured %s"}`, r.URL.Path)
}

// forwardTo puts c in front of managed cluster m: what c records then goes
// on to m's kube-apiserver as it came, upgrades included, so that m enforces
// the identity and kubectl gets real answers (discovery, the pod, exec). m's
// "gateway" client certificate authenticates it there instead of the
// gateway's token.
func (c *captureCluster) forwardTo(t *testing.T, m *localenv.Cluster) {
	t.Helper()
	target, err := url.Parse(m.URL)
	if err != nil {
		t.Fatal(err)
	}
	// HTTP/1.1 only (no ForceAttemptHTTP2): ReverseProxy passes upgrades over it.
	tr := &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: poolOf(m.CA.CertPEM), Certificates: []tls.Certificate{m.GatewayUser.TLS()}}}
	t.Cleanup(tr.CloseIdleConnections)
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Header.Del("Authorization")
		},
		Transport: tr,
	}
	c.mu.Lock()
	c.forward = rp
	c.mu.Unlock()
}

// relayTo puts c in front of managed cluster m as a relay that changes
// nothing: what c records goes on to m's kube-apiserver with every header
// as it came (Authorization and Impersonate-* included) and, when the
// gateway presented a client certificate, the same certificate (from certs,
// by common name; the test issued them). So m answers exactly what the
// gateway asked for, as whom it asked: a SelfSubjectReview through c says
// whom m served. Ordinary requests only.
func (c *captureCluster) relayTo(t *testing.T, m *localenv.Cluster, certs map[string]tls.Certificate) {
	t.Helper()
	target, err := url.Parse(m.URL)
	if err != nil {
		t.Fatal(err)
	}
	transport := func(cert *tls.Certificate) *http.Transport {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: poolOf(m.CA.CertPEM)}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		tr := &http.Transport{TLSClientConfig: cfg}
		t.Cleanup(tr.CloseIdleConnections)
		return tr
	}
	byCN := map[string]*http.Transport{"": transport(nil)}
	for cn, cert := range certs {
		byCN[cn] = transport(&cert)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport: roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			tr, ok := byCN[clientCN(req)]
			if !ok {
				return nil, fmt.Errorf("the relay has no certificate for CN %q", clientCN(req))
			}
			return tr.RoundTrip(req)
		}),
	}
	c.mu.Lock()
	c.forward = rp
	c.mu.Unlock()
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// clientCN is the common name of the client certificate r came with, or "".
func clientCN(r *http.Request) string {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return ""
	}
	return r.TLS.PeerCertificates[0].Subject.CommonName
}

// requests returns what reached the capture so far.
func (c *captureCluster) requests() []capturedRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]capturedRequest(nil), c.reqs...)
}

// since returns the requests that arrived after the first n.
func (c *captureCluster) since(n int) []capturedRequest {
	r := c.requests()
	if n > len(r) {
		return nil
	}
	return r[n:]
}

func (c *captureCluster) setRedirect(to string) {
	c.mu.Lock()
	c.redirect = to
	c.mu.Unlock()
}

// rawResponse is what rawRequest read back.
type rawResponse struct {
	Code   int
	Header http.Header
	Body   string
}

// rawRequest writes request exactly as given over TLS (HTTP/1.1) to addr,
// with a client certificate if given, and reads the response: for requests
// no Go client sends as they are (hop-by-hop headers, upgrades, unclean
// paths). Ordinary requests should say "Connection: close".
func rawRequest(t *testing.T, addr string, rootCAs []byte, cert *tls.Certificate, request string) rawResponse {
	t.Helper()
	host, _, _ := net.SplitHostPort(addr)
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}, RootCAs: poolOf(rootCAs), ServerName: host}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(kubectlTimeout))
	if _, err := conn.Write([]byte(request)); err != nil {
		t.Fatalf("write request: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read the response: %v", err)
	}
	defer resp.Body.Close()
	var body []byte
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	}
	return rawResponse{Code: resp.StatusCode, Header: resp.Header, Body: string(body)}
}

// poolOf is a CertPool of the PEM certificates given.
func poolOf(pemCerts []byte) *x509.CertPool {
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(pemCerts)
	return p
}

// hostOf is the host:port of an https URL.
func hostOf(u string) string { return strings.TrimPrefix(u, "https://") }
