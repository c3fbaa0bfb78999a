package localenv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// FakeKubelet serves the kubelet endpoints that kube-apiserver calls for
// exec, attach, port-forward and logs, with the real protocol servers from
// k8s.io/cri-streaming, over HTTPS on 127.0.0.1. It runs in this process.
type FakeKubelet struct {
	Cluster string // printed by `hostname`, so tests can tell clusters apart
	Port    int
	Echo    *EchoServer // where every port-forward goes

	srv *http.Server
	ln  net.Listener
}

const (
	streamIdleTimeout     = 4 * time.Hour
	streamCreationTimeout = remotecommand.DefaultStreamCreationTimeout
)

func startFakeKubelet(cluster string, cert *KeyPair) (*FakeKubelet, error) {
	pair, err := tls.X509KeyPair(cert.CertPEM, cert.KeyPEM)
	if err != nil {
		return nil, err
	}
	echo, err := startEcho()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		echo.Close()
		return nil, err
	}
	k := &FakeKubelet{Cluster: cluster, Port: ln.Addr().(*net.TCPAddr).Port, Echo: echo, ln: ln}
	k.srv = &http.Server{
		Handler:   k.routes(),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
		// Streams are hijacked and unaffected; this only bounds idle keep-alives.
		IdleTimeout: 2 * time.Minute,
	}
	go func() { _ = k.srv.ServeTLS(ln, "", "") }()
	return k, nil
}

// Close stops serving and closes hijacked and follow connections.
func (k *FakeKubelet) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := k.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = k.srv.Close()
	}
	k.Echo.Close()
	return err
}

func (k *FakeKubelet) routes() *http.ServeMux {
	mux := http.NewServeMux()
	for _, prefix := range []string{"/exec/{ns}/{pod}", "/exec/{ns}/{pod}/{uid}"} {
		mux.HandleFunc(prefix+"/{container}", k.serveExec)
	}
	for _, prefix := range []string{"/attach/{ns}/{pod}", "/attach/{ns}/{pod}/{uid}"} {
		mux.HandleFunc(prefix+"/{container}", k.serveAttach)
	}
	// Capital F: the path kube-apiserver calls.
	mux.HandleFunc("/portForward/{ns}/{pod}", k.servePortForward)
	mux.HandleFunc("/portForward/{ns}/{pod}/{uid}", k.servePortForward)
	mux.HandleFunc("/containerLogs/{ns}/{pod}/{container}", k.serveLogs)
	return mux
}

func (k *FakeKubelet) serveExec(w http.ResponseWriter, r *http.Request) {
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	remotecommand.ServeExec(w, r, k, r.PathValue("pod"), r.PathValue("uid"), r.PathValue("container"),
		r.URL.Query()["command"], opts, streamIdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

func (k *FakeKubelet) serveAttach(w http.ResponseWriter, r *http.Request) {
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	remotecommand.ServeAttach(w, r, k, r.PathValue("pod"), r.PathValue("uid"), r.PathValue("container"),
		opts, streamIdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

func (k *FakeKubelet) servePortForward(w http.ResponseWriter, r *http.Request) {
	opts, err := portforward.NewV4Options(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	portforward.ServePortForward(w, r, k, r.PathValue("pod"), r.PathValue("uid"), opts,
		streamIdleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
}

// PortForward connects every forwarded port to the echo listener.
func (k *FakeKubelet) PortForward(ctx context.Context, pod, uid string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	conn, err := net.Dial("tcp", k.Echo.Addr)
	if err != nil {
		return fmt.Errorf("port %d: %w", port, err)
	}
	defer conn.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-ctx.Done():
			conn.Close()
		case <-stop:
		}
	}()
	go func() {
		_, _ = io.Copy(conn, stream)
		// Pass the client's EOF on; the echo server then closes its side.
		_ = conn.(*net.TCPConn).CloseWrite()
	}()
	_, _ = io.Copy(stream, conn)
	return nil
}

// logLines is how many lines a container has logged before any request.
const logLines = 10

// serveLogs writes numbered lines (honouring tailLines); with follow=true one more per second until
// the client leaves, or for container "bulk" as fast as the client reads them
// (each line flushed, as the kubelet flushes each write). Container "slow"
// sleeps before answering a non-follow request, to show that ordinary
// requests are still cut by timeouts.
func (k *FakeKubelet) serveLogs(w http.ResponseWriter, r *http.Request) {
	container := r.PathValue("container")
	follow, _ := strconv.ParseBool(r.URL.Query().Get("follow"))
	if container == "slow" && !follow {
		select {
		case <-time.After(10 * time.Minute):
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain")
	flusher, _ := w.(http.Flusher)
	line := func(n int) bool {
		_, err := fmt.Fprintf(w, "%s %s/%s line %d\n", k.Cluster, r.PathValue("pod"), container, n)
		if flusher != nil {
			flusher.Flush()
		}
		return err == nil
	}
	first := 1
	if tail, err := strconv.Atoi(r.URL.Query().Get("tailLines")); err == nil && tail >= 0 {
		first = max(1, logLines-tail+1)
	}
	for n := first; n <= logLines; n++ {
		if !line(n) {
			return
		}
	}
	if !follow {
		return
	}
	if container == "bulk" {
		for n := logLines + 1; r.Context().Err() == nil; n++ {
			if !line(n) {
				return
			}
		}
		return
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for n := logLines + 1; ; n++ {
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
			if !line(n) {
				return
			}
		}
	}
}
