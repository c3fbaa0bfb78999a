// Package konnectivity is the gateway's client of a konnectivity
// (apiserver-network-proxy) proxy-server, through which clusters behind NAT
// are reached.
//
// A Manager keeps ONE reusable gRPC tunnel (one gRPC ClientConn, one stream
// per dial) to the proxy-server, rebuilds it with backoff when its connection
// is lost, and follows mTLS material that rotates on disk: a new tunnel takes
// new dials while the replaced one keeps its live connections for a grace
// period. Dials fail fast while no tunnel is healthy, so callers answer 503
// instead of hanging. Each connection dialed through it writes on a
// goroutine of its own (sender), not on its callers'.
//
// The material is reloaded here rather than through k8s.io/apiserver's
// dynamiccertificates: there the CA (DynamicFileCAContent) and the client
// key pair (DynamicCertKeyPairContent) are two controllers that notify
// separately, so a rotation of both would build a tunnel from the new
// certificate and the old CA in between. Here the three files are read,
// validated and adopted as one unit, identified by one digest, and a bad
// set is counted and logged once while the last good one stays.
package konnectivity
