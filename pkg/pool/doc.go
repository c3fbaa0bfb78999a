// Package pool owns the transports that proxied requests use to reach managed
// clusters: one entry per ClusterGateway in a bounded LRU, keyed by cluster
// name and tagged with a fingerprint of everything that shapes the transport.
//
// It exists because building a transport per request (or relying on
// client-go's process-global transport cache) leaks transports, connections
// and tunnels on every rotation. Here an entry is replaced when its
// fingerprint changes, evicted when the LRU is full or it sat idle, and
// retired gracefully: it is never handed out again, idle connections close at
// once, live streams may run for RetireGrace, then every connection it dialed
// is closed. A live entry unused for IdleConnTimeout closes its idle
// connections and stays. Requests that arrive together at an entry with no
// connection share one dial and handshake (coldStart). Every goroutine
// belongs to the Pool and Close waits for them, and no timer, running or
// stopped, holds a retired entry.
package pool
