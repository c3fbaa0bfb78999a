package konnectivity

import (
	"crypto/tls"
	"io"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
)

// TestTunnelAdvertisesAFixedWindow reads what the gateway's gRPC client first
// sends a proxy-server: a fixed 16 MiB window for the stream and the
// connection. gRPC estimates the bandwidth-delay product (a PING after nearly
// every response read through the tunnel) only while no window is set, so this
// is what keeps that ping off the request path. A listener stands in for the
// proxy-server: only the client's first frames matter.
func TestTunnelAdvertisesAFixedWindow(t *testing.T) {
	dir := t.TempDir()
	serverCA, clientCA := testpki.MustCA(t, "proxy-server-ca"), testpki.MustCA(t, "gateway-client-ca")
	serving := serverCA.MustIssue(t, testpki.Spec{CommonName: "proxy-server", IPs: []string{"127.0.0.1"}, Server: true})
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{serving.TLS()}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type first struct {
		window     uint32 // SETTINGS_INITIAL_WINDOW_SIZE, 0 if not sent
		connUpdate uint32 // the first connection-level WINDOW_UPDATE
	}
	got := make(chan first, 1)
	go func() {
		var f first
		defer func() { got <- f }()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		preface := make([]byte, len(http2.ClientPreface))
		if _, err := io.ReadFull(c, preface); err != nil || string(preface) != http2.ClientPreface {
			return
		}
		fr := http2.NewFramer(io.Discard, c)
		for f.connUpdate == 0 {
			frame, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch frame := frame.(type) {
			case *http2.SettingsFrame:
				if v, ok := frame.Value(http2.SettingInitialWindowSize); ok {
					f.window = v
				}
			case *http2.WindowUpdateFrame:
				if frame.StreamID == 0 {
					f.connUpdate = frame.Increment
				}
			}
		}
	}()

	opts := NewOptions()
	opts.Address = ln.Addr().String()
	opts.CAFile = dir + "/ca.crt"
	writeFile(t, opts.CAFile, serverCA.CertPEM)
	cert, key := issue(t, clientCA, "cluster-gateway")
	opts.CertFile, opts.KeyFile = dir+"/gw.crt", dir+"/gw.key"
	writeFile(t, opts.CertFile, cert)
	writeFile(t, opts.KeyFile, key)
	startManager(t, *opts) // its first build dials the listener

	f := <-got
	const initial = 65535 // HTTP/2's initial connection window
	if f.window != tunnelWindow || f.connUpdate != tunnelWindow-initial {
		t.Fatalf("the tunnel's gRPC client advertised a stream window of %d and raised the connection window by %d; want %d and %d (a fixed window, so no bandwidth-estimation pings)",
			f.window, f.connUpdate, tunnelWindow, tunnelWindow-initial)
	}
}
