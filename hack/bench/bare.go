package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
)

// bareProxy is the baseline: httputil.ReverseProxy in this process with ONE
// shared transport to the upstream, served over TLS with HTTP/2 like the gateway.
type bareProxy struct {
	URL    string
	CAPEM  []byte
	srv    *http.Server
	upTr   *http.Transport
	served chan error
}

func startBareProxy(upstream string, upCAPEM, certPEM, keyPEM []byte) (*bareProxy, error) {
	target, err := url.Parse(upstream)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(upCAPEM) {
		return nil, errors.New("no certificate in the upstream CA bundle")
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	upTr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}},
		ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 25, IdleConnTimeout: 90 * time.Second, DisableCompression: true,
	}
	serving, caPEM, err := selfSigned()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &bareProxy{URL: "https://" + ln.Addr().String(), CAPEM: caPEM, upTr: upTr, served: make(chan error, 1)}
	b.srv = &http.Server{
		Handler: &httputil.ReverseProxy{
			Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
			Transport: upTr,
		},
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{serving}},
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { b.served <- b.srv.ServeTLS(ln, "", "") }()
	return b, nil
}

func (b *bareProxy) Close() {
	_ = b.srv.Close()
	<-b.served
	b.upTr.CloseIdleConnections()
}

// selfSigned is a serving certificate for 127.0.0.1 and its CA's PEM,
// which the load client trusts.
func selfSigned() (tls.Certificate, []byte, error) {
	ca, err := testpki.NewCA("bench-bare-proxy-ca")
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	p, err := ca.Issue(testpki.Spec{CommonName: "bench-bare-proxy", IPs: []string{"127.0.0.1"}, Server: true})
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return p.TLS(), ca.CertPEM, nil
}
