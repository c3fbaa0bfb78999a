package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestRefusedCertificatesAreNotKept floods the gateway's port with
// connections that each present a different, large, self-signed client
// certificate: no credential at all, as anyone who can reach the port can
// (the server asks for client certificates without requiring them, and Go
// takes a certificate message of up to 256 KiB). What the gateway keeps
// after a refusal must not grow with such connections: its live heap after
// a garbage collection comes back near where it was.
func TestRefusedCertificatesAreNotKept(t *testing.T) {
	requireGateway(t)
	const (
		conns    = 300
		certSize = 180 << 10
		parallel = 8
		bound    = 24 << 20 // 300 certificates kept would be over 50 MiB
	)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	padding := make([]byte, certSize)
	bigCert := func(i int) tls.Certificate {
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(int64(i + 1)),
			Subject:      pkix.Name{CommonName: fmt.Sprintf("flood-%d", i)},
			NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			ExtraExtensions: []pkix.Extension{{Id: asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 99999, 1}, Value: padding}},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	liveHeap := func() float64 {
		t.Helper()
		// The heap profile with gc=1 collects garbage first: what is left is live.
		if code, _, err := gatewayGet(t, "/debug/pprof/heap?gc=1"); err != nil || code != http.StatusOK {
			t.Fatalf("the gateway's heap profile: %d %v", code, err)
		}
		return gatewayMetrics(t)["go_memstats_heap_alloc_bytes"]
	}
	before := liveHeap()

	var wg sync.WaitGroup
	sem := make(chan struct{}, parallel)
	errs := make(chan error, conns)
	for i := range conns {
		cert := bigCert(i)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
				MinVersion: tls.VersionTLS12, RootCAs: poolOf(env.Gateway.CA.CertPEM),
				// Presented whatever CAs the server names.
				GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil },
			}}}
			defer c.CloseIdleConnections()
			resp, err := c.Get(env.Gateway.URL + "/apis/gateway.clustergateway.io/v1alpha1/clustergateways")
			if err != nil {
				errs <- err
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
				errs <- fmt.Errorf("a self-signed certificate: %s, want 401 or 403 (anonymous)", resp.Status)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	after := liveHeap()
	t.Logf("live heap %.1f MiB before %d connections with %d KiB certificates, %.1f MiB after", before/(1<<20), conns, certSize>>10, after/(1<<20))
	if after-before > bound {
		t.Fatalf("the live heap grew by %.1f MiB after %d refused %d KiB certificates, want less than %d MiB: the gateway keeps what unauthenticated clients sent",
			(after-before)/(1<<20), conns, certSize>>10, bound>>20)
	}
}
