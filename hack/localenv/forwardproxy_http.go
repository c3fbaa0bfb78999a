package localenv

import (
	"context"
	"errors"
	"log"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/elazarl/goproxy"
)

// startHTTPConnectProxy serves HTTP CONNECT with github.com/elazarl/goproxy,
// a widely used forward proxy library, the way a corporate egress proxy
// (squid and the like) tunnels TLS: the gateway's TLS runs end to end to the
// managed cluster through the tunnel. Plain (non-CONNECT) proxying is refused:
// the gateway never uses it.
func (e *Env) startHTTPConnectProxy() (*ForwardProxy, error) {
	p, err := e.newForwardProxy("http")
	if err != nil {
		return nil, err
	}
	serveHTTPConnect(p)
	return p, nil
}

// serveHTTPConnect serves CONNECT on p's listener until p.stop.
func serveHTTPConnect(p *ForwardProxy) {
	gp := goproxy.NewProxyHttpServer()
	gp.Logger = log.New(p.logFile, "", log.LstdFlags|log.Lmicroseconds)
	// Takes precedence over ConnectDial, which NewProxyHttpServer points at
	// $HTTPS_PROXY: never chain to whatever proxy the machine has.
	gp.ConnectDialWithReq = func(req *http.Request, network, addr string) (net.Conn, error) {
		return p.dial(req.Context(), network, addr)
	}
	gp.OnRequest().DoFunc(func(r *http.Request, _ *goproxy.ProxyCtx) (*http.Request, *http.Response) {
		return r, goproxy.NewResponse(r, goproxy.ContentTypeText, http.StatusMethodNotAllowed, "this test proxy only tunnels (CONNECT)\n")
	})
	srv := &http.Server{Handler: gp, ReadHeaderTimeout: 10 * time.Second, ErrorLog: gp.Logger.(*log.Logger)}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = srv.Serve(p.ln) }()
	p.stop = func() error {
		// Close, not Shutdown: hijacked tunnels are not the server's to wait
		// for; ForwardProxy.Close cuts them.
		err := srv.Close()
		wg.Wait()
		if errors.Is(err, http.ErrServerClosed) || errors.Is(err, context.Canceled) {
			err = nil
		}
		return err
	}
}
