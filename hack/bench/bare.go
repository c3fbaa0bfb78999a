package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
	"github.com/clustergateway/cluster-gateway/internal/testfrontend"
)

// The bare reverse proxy is the baseline: httputil.ReverseProxy with ONE
// shared transport, served over TLS and HTTP/2 like the gateway
// (internal/testfrontend's server). It runs in a process of its own, as the
// gateway does: in the bench process it would share a scheduler and GCs
// with the clients, and its CPU could not be read alone.

// bareChildFlag makes the bench binary run as the bare proxy.
const bareChildFlag = "bare-proxy-child"

// bareReady is the child's first line on stdout.
type bareReady struct {
	URL   string
	CAPEM []byte // the CA of its serving certificate
}

// bareChildMain serves the bare proxy to -upstream until its stdin ends.
func bareChildMain(args []string) error {
	fs := flag.NewFlagSet(bareChildFlag, flag.ContinueOnError)
	upstream := fs.String("upstream", "", "URL of the upstream kube-apiserver")
	caFile := fs.String("ca", "", "CA bundle of the upstream")
	certFile := fs.String("cert", "", "client certificate for the upstream")
	keyFile := fs.String("key", "", "its key")
	aggregated := fs.Bool("aggregated", false, "serve behind the hub's aggregator: its discovery, and "+bareProxyPrefix+"NAME/proxy/PATH to PATH upstream")
	var tun tunnelFlags
	fs.StringVar(&tun.server, "konnectivity-server", "", "proxy-server address: reach the upstream through a konnectivity tunnel")
	fs.StringVar(&tun.ca, "konnectivity-ca", "", "CA of the proxy-server's serving certificate")
	fs.StringVar(&tun.cert, "konnectivity-cert", "", "client certificate for the proxy-server")
	fs.StringVar(&tun.key, "konnectivity-key", "", "its key")
	if err := fs.Parse(args); err != nil {
		return err
	}
	target, err := url.Parse(*upstream)
	if err != nil {
		return err
	}
	upTLS, err := clientTLS(*caFile, *certFile, *keyFile)
	if err != nil {
		return fmt.Errorf("upstream: %w", err)
	}
	var tunnel client.ReusableTunnel
	if tun.server != "" {
		if tunnel, err = tun.open(); err != nil {
			return err
		}
		defer tunnel.Close() // after the connections through it
	}
	tr := bareTransport(upTLS, tunnel)
	defer tr.ordinary.CloseIdleConnections()
	var h http.Handler = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			if *aggregated {
				pr.Out.URL.Path, _ = aggregatedSubpath(pr.In.URL.Path)
				pr.Out.URL.RawPath = ""
			}
			pr.SetURL(target)
		},
		Transport: tr,
	}
	var names []string
	if *aggregated {
		h, names = aggregatedBare(h), []string{bareServiceDNS}
	}
	srv, err := testfrontend.StartNamed(withBareStats(h), names...)
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := json.NewEncoder(os.Stdout).Encode(bareReady{URL: srv.URL, CAPEM: srv.CAPEM}); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, os.Stdin) // until the bench closes it, or dies
	return nil
}

// bareTransport is the bare proxy's transport to its upstream: one shared
// HTTP/2 transport, and HTTP/1.1 for upgrades, through tunnel if not nil.
func bareTransport(upTLS *tls.Config, tunnel client.ReusableTunnel) upgradeSplit {
	upTr := &http.Transport{
		TLSClientConfig:   upTLS,
		ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 25, IdleConnTimeout: 90 * time.Second, DisableCompression: true,
	}
	// Upgrades (exec, attach, port-forward) need HTTP/1.1: Go's transport
	// keeps only WebSocket upgrades off HTTP/2, and a SPDY upgrade sent on
	// an HTTP/2 connection fails. httputil.ReverseProxy then copies the
	// switched connection both ways.
	h1TLS := upTLS.Clone()
	h1TLS.NextProtos = []string{"http/1.1"}
	upgradeTr := &http.Transport{TLSClientConfig: h1TLS, DisableCompression: true}
	if tunnel != nil {
		upTr.DialContext = tunnel.DialContext
		upgradeTr.DialContext = tunnel.DialContext
	}
	return upgradeSplit{ordinary: upTr, upgrade: upgradeTr}
}

// upgradeSplit sends upgrade requests over HTTP/1.1, everything else over
// the shared HTTP/2 transport.
type upgradeSplit struct{ ordinary, upgrade *http.Transport }

func (u upgradeSplit) RoundTrip(req *http.Request) (*http.Response, error) {
	if httpstream.IsUpgradeRequest(req) {
		return u.upgrade.RoundTrip(req)
	}
	return u.ordinary.RoundTrip(req)
}

// bareProxy is the running child.
type bareProxy struct {
	*child
	bareReady
}

// startBareProxy starts the bare proxy to cluster c with the gateway's
// client certificate for c: through k's proxy-server if k is set, and to be
// served behind the hub if aggregated (registerBareBehindHub).
func startBareProxy(ctx context.Context, c *localenv.Cluster, k *localenv.Konnectivity, aggregated bool) (*bareProxy, error) {
	what := "the bare proxy"
	args := []string{"-upstream", c.URL, "-ca", c.CA.CertFile, "-cert", c.GatewayUser.CertFile, "-key", c.GatewayUser.KeyFile}
	if aggregated {
		what = "the bare proxy behind the hub"
		args = append(args, "-aggregated")
	}
	if k != nil {
		what = "the bare proxy over Konnectivity"
		args = append(args, "-konnectivity-server", k.Servers[0].Address(), "-konnectivity-ca", k.CAFile,
			"-konnectivity-cert", k.CertFile, "-konnectivity-key", k.KeyFile)
	}
	ch, err := startChild(ctx, what, bareChildFlag, args...)
	if err != nil {
		return nil, err
	}
	b := &bareProxy{child: ch}
	ready := make(chan error, 1)
	go func() {
		out := bufio.NewScanner(ch.stdout)
		if !out.Scan() {
			ready <- ch.errorf("exited before it was ready: %v", out.Err())
			return
		}
		ready <- json.Unmarshal(out.Bytes(), &b.bareReady)
		_, _ = io.Copy(io.Discard, ch.stdout)
	}()
	select {
	case err = <-ready:
	case <-time.After(childAnswer):
		err = ch.errorf("was not ready within %s", childAnswer)
	}
	if err != nil {
		return nil, errors.Join(err, b.stop())
	}
	return b, nil
}

// tunnelFlags make the bare proxy reach its upstream through a konnectivity
// proxy-server with konnectivity-client's one reusable gRPC tunnel: the
// baseline of the Konnectivity goal, with nothing of the gateway's own.
type tunnelFlags struct{ server, ca, cert, key string }

func (f tunnelFlags) open() (client.ReusableTunnel, error) {
	cfg, err := clientTLS(f.ca, f.cert, f.key)
	if err != nil {
		return nil, fmt.Errorf("proxy-server: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), childAnswer)
	defer cancel()
	creds := credentials.NewTLS(cfg)
	//nolint:staticcheck // WithBlock: a tunnel that cannot be built fails the start, not the first request.
	t, err := client.CreateGRPCTunnel(ctx, f.server, grpc.WithTransportCredentials(creds), grpc.WithBlock())
	if err != nil {
		return nil, fmt.Errorf("konnectivity tunnel to %s: %w", f.server, err)
	}
	return t, nil
}

// clientTLS trusts the CA bundle in caFile and presents the key pair in
// certFile and keyFile.
func clientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificate in the CA bundle %s", caFile)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, Certificates: []tls.Certificate{pair}}, nil
}
