package main

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// profileShare is the cumulative share of the gateway's CPU profile spent
// under one function.
type profileShare struct {
	Key, What, Func string
	Pct             float64
}

// profileFuncs are the parts of the gateway's per-request work worth naming.
// Client-certificate chains are verified once per connection and cached
// (pkg/certauth), so crypto/x509's Verify should be near zero in steady state.
var profileFuncs = []profileShare{
	{Key: "authn", What: "authentication (the authenticators, not the handlers after them)", Func: "k8s.io/apiserver/pkg/authentication/request/union.(*unionAuthRequestHandler).AuthenticateRequest"},
	{Key: "certauth", What: "of which pkg/certauth's cached chain lookup (by connection, else a hash of the peer chain in an LRU)", Func: "github.com/clustergateway/cluster-gateway/pkg/certauth.(*Cache).lookupConn"},
	{Key: "verify", What: "of which chain verification (crypto/x509, on cache misses)", Func: "crypto/x509.(*Certificate).Verify"},
	{Key: "authz", What: "authorization: pkg/authzcache's decisions (the lookup, and the authorizers on a miss)", Func: "github.com/clustergateway/cluster-gateway/pkg/authzcache.(*Authorizer).Authorize"},
	{Key: "webhook", What: "of which the delegated (webhook) authorizer: SubjectAccessReviews on misses", Func: "k8s.io/apiserver/plugin/pkg/authorizer/webhook.(*WebhookAuthorizer).Authorize"},
	{Key: "serve", What: "the proxy handler (its own goroutine; the HTTP/2 connections' read loops run apart)", Func: "github.com/clustergateway/cluster-gateway/pkg/proxy.(*Proxy).Serve"},
	{Key: "acquire", What: "of which Pool.Acquire", Func: "github.com/clustergateway/cluster-gateway/pkg/pool.(*Pool).Acquire"},
	{Key: "otel", What: "OpenTelemetry HTTP server metrics of the generic server's tracing filter (in the gateway's chain only with --tracing-config-file)", Func: "go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp/internal/semconv.HTTPServer.RecordMetrics"},
	{Key: "tlsread", What: "TLS reads (client and upstream connections)", Func: "crypto/tls.(*Conn).Read"},
	{Key: "tlswrite", What: "TLS writes (client and upstream connections)", Func: "crypto/tls.(*Conn).Write"},
	{Key: "gc", What: "garbage collection (background marking)", Func: "runtime.gcBgMarkWorker"},
	{Key: "malloc", What: "allocation (the allocator itself, on every goroutine)", Func: "runtime.mallocgc"},
	{Key: "workers", What: "the handler chain on the request workers (pkg/workers): every filter, the proxy handler included", Func: "github.com/clustergateway/cluster-gateway/pkg/workers.(*Pool).handle"},
	{Key: "h2server", What: "HTTP/2 server: each client connection's read loop and frame handling", Func: "golang.org/x/net/http2.(*serverConn).serve"},
	{Key: "h2serverwrite", What: "HTTP/2 server: frame writes on their own goroutines", Func: "golang.org/x/net/http2.(*serverConn).writeFrameAsync"},
	{Key: "h2clientread", What: "HTTP/2 client to the cluster: the connection's read loop", Func: "golang.org/x/net/http2.(*ClientConn).readLoop"},
	{Key: "h2clientwrite", What: "HTTP/2 client to the cluster: writing each request (a goroutine per request)", Func: "golang.org/x/net/http2.(*clientStream).doRequest"},
	{Key: "hpackenc", What: "of which HTTP/2 client to the cluster: encoding each request's headers (HPACK) on that goroutine; through the hub every request carries a new Audit-Id, which is indexed and evicts an older entry, and the eviction's map lookups grow the new goroutine's stack (that growth included here)", Func: "golang.org/x/net/http2/hpack.(*Encoder).WriteField"},
	{Key: "sched", What: "scheduling: goroutines parking and waking", Func: "runtime.schedule"},
	{Key: "grpcsend", What: "Konnectivity tunnel: each connection's writes as gRPC messages, on the connection's sender goroutine (pkg/pool/konnectivity)", Func: "github.com/clustergateway/cluster-gateway/pkg/pool/konnectivity.(*sender).run"},
	{Key: "grpcloopy", What: "Konnectivity tunnel: gRPC's writer goroutine", Func: "google.golang.org/grpc/internal/transport.(*loopyWriter).run"},
	{Key: "grpcreader", What: "Konnectivity tunnel: gRPC's reader goroutine", Func: "google.golang.org/grpc/internal/transport.(*http2Client).reader"},
	{Key: "tunnelserve", What: "Konnectivity tunnel: konnectivity-client's dispatch of received packets", Func: "sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client.(*grpcTunnel).serve"},
	{Key: "stack", What: "goroutine stack growth: the HTTP/2 server runs each request in a new goroutine whose stack is copied each time it doubles; ordinary requests are handed to pkg/workers' goroutines, whose stacks have grown already (what remains is mostly the HTTP/2 client's goroutine per request)", Func: "runtime.copystack"},
}

// idleFuncs are the parts of the idle gateway's work (the prober) worth
// naming: a probe of a cluster without a pooled connection is a new
// connection, so mostly a TLS 1.3 handshake.
var idleFuncs = []profileShare{
	{Key: "handshake", What: "TLS handshakes (probes of clusters without a pooled connection)", Func: "crypto/tls.(*Conn).clientHandshake"},
	{Key: "keyshares", What: "of which the key shares offered (X25519 and ML-KEM-768 key generation)", Func: "crypto/tls.(*hybridKeyExchange).keyShares"},
	{Key: "secret", What: "of which the shared secret (X25519, ML-KEM decapsulation)", Func: "crypto/tls.(*hybridKeyExchange).clientSharedSecret"},
	{Key: "chain", What: "of which verifying the cluster's certificate chain", Func: "crypto/tls.(*Conn).verifyServerCertificate"},
	{Key: "sig", What: "of which verifying the cluster's handshake signature", Func: "crypto/tls.verifyHandshakeSignature"},
	{Key: "clientcert", What: "of which the client certificate (signing with the cluster credential's key)", Func: "crypto/tls.(*clientHandshakeStateTLS13).sendClientCertificate"},
	{Key: "entry", What: "building each probe's transient pool entry (TLS material parsed, transports)", Func: "github.com/clustergateway/cluster-gateway/pkg/pool.(*Pool).newEntry"},
	{Key: "readloop", What: "HTTP/2 read loops (the probes' answers)", Func: "golang.org/x/net/http2.(*ClientConn).readLoop"},
	{Key: "gc", What: "garbage collection (background marking)", Func: "runtime.gcBgMarkWorker"},
	{Key: "malloc", What: "allocation (the allocator itself)", Func: "runtime.mallocgc"},
}

// profiledLoads are the loads during whose first round the gateway is
// profiled, and what the profile shows.
var profiledLoads = []struct{ Key, What string }{
	{"gateway", "on its own port (Direct cluster)"},
	{"hub", "behind the hub (front-proxy authentication)"},
	{"konn", "on its own port, to the Konnectivity cluster"},
}

// profilePath is where the gateway's profile during load key goes: base
// (-gateway-profile) for the gateway port, base-<key>.pprof for the others;
// "" when that load is not profiled.
func profilePath(base, key string) string {
	if base == "" {
		return ""
	}
	switch key {
	case "gateway":
		return base
	case "hub", "konn":
		return strings.TrimSuffix(base, ".pprof") + "-" + key + ".pprof"
	}
	return ""
}

// allocPath is where the heap profile before or after the profiled round
// of the load whose CPU profile is at path goes.
func allocPath(path, which string) string {
	return strings.TrimSuffix(path, ".pprof") + "-allocs-" + which + ".pprof"
}

// readAllocs reads where the gateway allocated during the profiled round:
// the heap profiles' allocation samples after the round less before it,
// the sites with the most objects, per request of the round (sampled: an
// estimate; the exact totals are go_memstats_mallocs_total, section 2).
func (p *pathProfile) readAllocs(ctx context.Context, goBin, path string, requests int) {
	if requests <= 0 {
		return
	}
	out, err := exec.CommandContext(ctx, goBin, "tool", "pprof", "-top", "-sample_index=alloc_objects", "-nodecount=15",
		"-diff_base", allocPath(path, "before"), allocPath(path, "after")).Output()
	if err != nil {
		logf("cannot read the gateway's allocation profiles of %s: %v", path, err)
		return
	}
	for _, l := range topLines(string(out)) {
		p.AllocTop = append(p.AllocTop, topFunc{Func: l.name, Flat: l.flat / float64(requests), Cum: l.cum / float64(requests)})
	}
}

// topFunc is one function of a profile: its own (flat) and cumulative share.
type topFunc struct {
	Func      string
	Flat, Cum float64
}

// pathProfile is the gateway's CPU profile during one load.
type pathProfile struct {
	Key, What, Path string
	Samples         string // pprof's "Total samples = ..." (the CPU profiled)
	Shares          []profileShare
	Top             []topFunc // by flat share, highest first
	// Where the gateway allocated most objects in the profiled round:
	// objects per request, flat and cumulative (heap profile samples).
	AllocTop []topFunc
}

// topFuncs is how many functions of each profile the report lists.
const topFuncs = 12

// readProfiles reads the profiles runLoads wrote for the loads in ts.
func readProfiles(ctx context.Context, goBin, base string, ts []*target) []pathProfile {
	var out []pathProfile
	for _, pl := range profiledLoads {
		path := profilePath(base, pl.Key)
		if path == "" || !slices.ContainsFunc(ts, func(t *target) bool { return t.Key == pl.Key && t.TODO == "" }) {
			continue
		}
		if _, err := os.Stat(path); err != nil {
			continue
		}
		p, err := profileBreakdown(ctx, goBin, path, profileFuncs)
		if err != nil {
			logf("cannot read the gateway profile %s: %v", path, err)
			continue
		}
		p.Key, p.What = pl.Key, pl.What
		for _, t := range ts {
			if t.Key == pl.Key {
				p.readAllocs(ctx, goBin, path, t.res.ProfiledRequests)
			}
		}
		out = append(out, *p)
	}
	return out
}

// profileBreakdown reads flat and cumulative percentages with `go tool
// pprof -top`, and the shares of funcs.
func profileBreakdown(ctx context.Context, goBin, path string, funcs []profileShare) (*pathProfile, error) {
	out, err := exec.CommandContext(ctx, goBin, "tool", "pprof", "-top", "-nodecount=100000", "-nodefraction=0", "-edgefraction=0", path).Output()
	if err != nil {
		return nil, err
	}
	p := &pathProfile{Path: path}
	cum := map[string]float64{}
	for _, line := range strings.Split(string(out), "\n") {
		// flat flat% sum% cum cum% name
		if _, total, ok := strings.Cut(line, "Total samples = "); ok {
			p.Samples, _, _ = strings.Cut(total, " ")
		}
		f := strings.Fields(line)
		if len(f) < 6 || !strings.HasSuffix(f[1], "%") || !strings.HasSuffix(f[4], "%") {
			continue
		}
		flat, err1 := strconv.ParseFloat(strings.TrimSuffix(f[1], "%"), 64)
		c, err2 := strconv.ParseFloat(strings.TrimSuffix(f[4], "%"), 64)
		if err1 != nil || err2 != nil {
			continue
		}
		name := strings.Join(f[5:], " ")
		cum[name] = c
		p.Top = append(p.Top, topFunc{Func: name, Flat: flat, Cum: c})
	}
	slices.SortStableFunc(p.Top, func(a, b topFunc) int {
		switch {
		case a.Flat > b.Flat:
			return -1
		case a.Flat < b.Flat:
			return 1
		}
		return 0
	})
	p.Top = p.Top[:min(len(p.Top), topFuncs)]
	p.Shares = slices.Clone(funcs)
	for i := range p.Shares {
		p.Shares[i].Pct = cum[p.Shares[i].Func]
	}
	return p, nil
}

// share is the cumulative share of key in p (0 when absent).
func (p *pathProfile) share(key string) float64 {
	for _, s := range p.Shares {
		if s.Key == key {
			return s.Pct
		}
	}
	return 0
}
