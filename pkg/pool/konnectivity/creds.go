package konnectivity

import (
	"context"
	"net"

	"google.golang.org/grpc/credentials"
)

// failFastCreds reports a failed TLS handshake (say, a CA that does not
// verify the proxy-server) so the build ends at once: grpc would otherwise
// retry it quietly until DialTimeout, and our backoff is the retry policy.
// It also notes why an established connection broke (a TLS alert such as
// the server rejecting our client cert), for errors that say what to fix.
type failFastCreds struct {
	credentials.TransportCredentials
	onFailure func(error)
	noteErr   func(error)
}

func (c failFastCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil {
		c.noteErr(err)
		c.onFailure(err)
		return nil, nil, err
	}
	return &errNotingConn{Conn: conn, note: c.noteErr}, info, nil
}

func (c failFastCreds) Clone() credentials.TransportCredentials {
	return failFastCreds{TransportCredentials: c.TransportCredentials.Clone(), onFailure: c.onFailure, noteErr: c.noteErr}
}

// errNotingConn tells the first read error to its tunnel.
type errNotingConn struct {
	net.Conn
	note func(error)
}

func (c *errNotingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.note(err)
	}
	return n, err
}
