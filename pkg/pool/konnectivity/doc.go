// Package konnectivity is the gateway's client of konnectivity
// (apiserver-network-proxy) proxy-servers, through which clusters behind NAT
// are reached.
//
// A Manager keeps one reusable gRPC tunnel (one gRPC ClientConn, one stream
// per dial) to each proxy-server it is given; a server value owns the
// tunnels to one proxy-server: it builds them, rebuilds with backoff when
// the connection is lost, checks that the proxy-server still answers
// (health.go: a frozen one keeps its connection open and would otherwise go
// unnoticed for minutes), and retires and closes them. Dials take the
// healthy tunnels in turn and try the next proxy-server when one fails, so
// a proxy-server that dies costs no request as long as the agents are
// connected to every proxy-server (a proxy-server routes only to its own
// agents). Dials fail fast while no tunnel is healthy, so callers answer
// 503 instead of hanging. Each connection dialed through it writes on a
// goroutine of its own (sender), not on its callers'.
//
// The Manager follows mTLS material that rotates on disk, shared by all
// proxy-servers: new tunnels take new dials while the replaced ones keep
// their live connections for a grace period. The material is reloaded here
// rather than through k8s.io/apiserver's dynamiccertificates: there the CA
// (DynamicFileCAContent) and the client key pair
// (DynamicCertKeyPairContent) are two controllers that notify separately, so
// a rotation of both would build a tunnel from the new certificate and the
// old CA in between. Here the three files are read, validated and adopted as
// one unit, identified by one digest, and a bad set is counted and logged
// once while the last good one stays.
package konnectivity
