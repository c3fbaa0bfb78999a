package pool

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"golang.org/x/net/proxy"

	"github.com/clustergateway/cluster-gateway/pkg/endpointpolicy"
)

type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// proxyDialer returns a dial func that reaches addr through proxyURL. The
// proxy is handled in the dialer, not via http.Transport.Proxy, because the
// upgrade path (UpgradeAwareHandler's DialURL) only uses DialContext and would
// otherwise bypass the proxy. The proxy's own host is judged here as written
// and by forward's Control once resolved; addr is the caller's to judge
// (judgedDial), since the proxy resolves it.
func proxyDialer(cluster string, proxyURL *url.URL, forward *net.Dialer, policy *endpointpolicy.Policy) (dialFunc, error) {
	if err := policy.CheckHost(proxyURL.Hostname()); err != nil {
		return nil, fmt.Errorf("cluster %q proxy %s: %w", cluster, withoutUserInfo(proxyURL), err)
	}
	switch proxyURL.Scheme {
	case "http", "https":
		u := *proxyURL
		return func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialConnect(ctx, forward.DialContext, &u, addr)
		}, nil
	case "socks5", "socks5h":
		var auth *proxy.Auth
		if proxyURL.User != nil {
			pw, _ := proxyURL.User.Password()
			auth = &proxy.Auth{User: proxyURL.User.Username(), Password: pw}
		}
		d, err := proxy.SOCKS5("tcp", canonicalAddr(proxyURL, "1080"), auth, forward)
		if err != nil {
			return nil, fmt.Errorf("%w: cluster %q socks5 proxy %s: %v", ErrInvalidTarget, cluster, withoutUserInfo(proxyURL), err)
		}
		cd, ok := d.(proxy.ContextDialer)
		if !ok {
			return nil, fmt.Errorf("socks5 dialer %T does not support contexts; upgrade golang.org/x/net", d)
		}
		return cd.DialContext, nil
	default:
		return nil, fmt.Errorf("%w: cluster %q proxy URL scheme %q is not supported; use http, https or socks5", ErrInvalidTarget, cluster, proxyURL.Scheme)
	}
}

// dialConnect opens an HTTP CONNECT tunnel to addr through an http or https
// proxy, bounded by ctx (http.ReadResponse itself takes no context).
func dialConnect(ctx context.Context, forward dialFunc, proxyURL *url.URL, addr string) (net.Conn, error) {
	defaultPort := "80"
	if proxyURL.Scheme == "https" {
		defaultPort = "443"
	}
	raw, err := forward(ctx, "tcp", canonicalAddr(proxyURL, defaultPort))
	if err != nil {
		return nil, fmt.Errorf("dial proxy %s: %w", withoutUserInfo(proxyURL), err)
	}
	stop := context.AfterFunc(ctx, func() { _ = raw.SetDeadline(time.Unix(1, 0)) })
	conn, err := connectHandshake(ctx, raw, proxyURL, addr)
	if !stop() && err == nil {
		// ctx expired after the exchange finished: the deadline it set
		// would break the connection later, so give up now.
		err = ctx.Err()
	}
	if err != nil {
		_ = raw.Close()
		return nil, err
	}
	return conn, nil
}

func connectHandshake(ctx context.Context, raw net.Conn, proxyURL *url.URL, addr string) (net.Conn, error) {
	conn := raw
	if proxyURL.Scheme == "https" {
		tc := tls.Client(raw, &tls.Config{ServerName: proxyURL.Hostname(), MinVersion: tls.VersionTLS12})
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, fmt.Errorf("TLS handshake with proxy %s: %w", withoutUserInfo(proxyURL), err)
		}
		conn = tc
	}
	req := &http.Request{
		Method: http.MethodConnect,
		URL:    &url.URL{Opaque: addr},
		Host:   addr,
		Header: make(http.Header),
	}
	if u := proxyURL.User; u != nil {
		pw, _ := u.Password()
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u.Username()+":"+pw)))
	}
	if err := req.Write(conn); err != nil {
		return nil, fmt.Errorf("send CONNECT to proxy %s: %w", withoutUserInfo(proxyURL), err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, fmt.Errorf("read CONNECT response from proxy %s: %w", withoutUserInfo(proxyURL), err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("proxy %s refused CONNECT to %s: %s", withoutUserInfo(proxyURL), addr, resp.Status)
	}
	if br.Buffered() > 0 {
		// The proxy sent bytes past its response: they belong to the tunnel.
		return &bufferedConn{Conn: conn, r: br}, nil
	}
	return conn, nil
}

// bufferedConn replays bytes read past the CONNECT response.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// withoutUserInfo names a URL in errors and logs: the user name and password
// of a proxy are credentials, so neither is shown (url.Redacted keeps the name).
func withoutUserInfo(u *url.URL) string {
	c := *u
	c.User = nil
	return c.String()
}
