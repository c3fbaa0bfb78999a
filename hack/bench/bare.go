package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/clustergateway/cluster-gateway/internal/testfrontend"
)

// bareProxy is the baseline: httputil.ReverseProxy in this process with ONE
// shared transport to the upstream, served over TLS with HTTP/2 like the
// gateway (internal/testfrontend's server, as pkg/proxy's benchmarks use).
type bareProxy struct {
	*testfrontend.Server
	upTr *http.Transport
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
	srv, err := testfrontend.Start(&httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport: upTr,
	})
	if err != nil {
		return nil, err
	}
	return &bareProxy{Server: srv, upTr: upTr}, nil
}

func (b *bareProxy) Close() {
	b.Server.Close()
	b.upTr.CloseIdleConnections()
}
