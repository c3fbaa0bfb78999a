package main

import (
	"strings"
	"testing"
)

// peekText is `go tool pprof -peek` output around Serve, as pprof prints it.
const peekText = `Showing nodes accounting for 460079, 98.59% of 466667 total
----------------------------------------------------------+-------------
      flat  flat%   sum%        cum   cum%   calls calls% + context 	 	 
----------------------------------------------------------+-------------
                                              4002   100% |   github.com/clustergateway/cluster-gateway/pkg/proxy.BenchmarkProxyGateway.Handler.func2
      2001 0.043% 0.043%       8004  0.28%                | github.com/clustergateway/cluster-gateway/pkg/proxy.(*Proxy).Serve
                                              4002 39.14% |   github.com/clustergateway/cluster-gateway/pkg/proxy.parseInnerOnce
                                              2001 15.37% |   net/http.(*Request).WithContext (partial-inline)
----------------------------------------------------------+-------------
                                              9999   100% |   something.Else
`

const topText = `Showing nodes accounting for 291162, 62.39% of 466667 total
      flat  flat%   sum%        cum   cum%
     20010 17.12% 17.12%      80040 17.12%  net/http.(*http2serverConn).runHandler
      2001 13.63% 30.75%      40020 13.63%  github.com/clustergateway/cluster-gateway/pkg/proxy.(*Proxy).Serve
         0  0.00% 30.75%      32016  6.00%  net/http/httputil.(*ReverseProxy).ServeHTTP (inline)
`

// The profiles are read per request (the counts over the requests, the
// b.N = 1 run included), Serve's own allocations by callee, largest first.
func TestAllocProfileParsing(t *testing.T) {
	per := func(v float64) float64 { return v / 2001 }
	sites := peekCallees(peekText, fnServe, per)
	want := []allocSite{{"github.com/clustergateway/cluster-gateway/pkg/proxy.parseInnerOnce", 2}, {"itself", 1}, {"net/http.(*Request).WithContext", 1}}
	if len(sites) != len(want) {
		t.Fatalf("Serve's callees: %+v, want %+v", sites, want)
	}
	for i := range want {
		if sites[i].Name != want[i].Name || !near(sites[i].Allocs, want[i].Allocs) {
			t.Fatalf("Serve's callees: %+v, want %+v", sites, want)
		}
	}
	cum := map[string]float64{}
	for _, l := range topLines(topText) {
		cum[l.name] = per(l.cum)
	}
	if !near(cum[fnHandlers], 40) || !near(cum[fnServe], 20) || !near(cum[fnReverse], 16) {
		t.Fatalf("cumulative allocations per request: %v", cum)
	}
}

// A -diff_base profile (the load's allocations, after less before) can
// have negative counts; its rows are read too.
func TestAllocDiffRows(t *testing.T) {
	const diff = `      flat  flat%   sum%        cum   cum%
     -3000 -1.50% -1.50%       6000  3.00%  crypto/tls.(*Conn).Write
      9000  4.50%  3.00%       9000  4.50%  bufio.NewReaderSize (inline)
`
	got := topLines(diff)
	if len(got) != 2 || got[0] != (topLine{flat: -3000, cum: 6000, name: "crypto/tls.(*Conn).Write"}) ||
		got[1] != (topLine{flat: 9000, cum: 9000, name: "bufio.NewReaderSize"}) {
		t.Fatalf("diff rows: %+v", got)
	}
}

// The difference from the bare proxy is split into the front end's
// stand-in, the handler's own work, the ReverseProxy and the rest, which
// add up to it.
func TestAllocLimits(t *testing.T) {
	gb := &goBench{
		Samples: map[string][]benchSample{
			"BenchmarkProxyGateway/list": {{AllocsOp: 230}}, "BenchmarkBareReverseProxy/list": {{AllocsOp: 206}},
			"BenchmarkProxyGateway/get": {{AllocsOp: 180}}, "BenchmarkBareReverseProxy/get": {{AllocsOp: 165}},
		},
		Allocs: map[string]*allocProfile{
			"BenchmarkProxyGateway/list": {Command: "go test …", Total: 230,
				Cum:   map[string]float64{fnHandlers: 62, fnServe: 48, fnReverse: 36, "time.NewTimer": 3},
				Serve: []allocSite{{"github.com/clustergateway/cluster-gateway/pkg/proxy.parseInnerOnce", 8}, {"itself", 1}, {"x", 3}}},
			"BenchmarkBareReverseProxy/list": {Total: 206, Cum: map[string]float64{fnHandlers: 38, fnReverse: 37}},
		},
	}
	var b strings.Builder
	(&report{GoBench: gb}).allocLimits(&b)
	out := b.String()
	// front end (62-48)-(38-37) = 13, own 48-36 = 12, ReverseProxy -1, rest 24-13-12+1 = 0.
	for _, s := range []string{"In process (`list`): +24 allocs/op", "does without: 13.0", "beside the ReverseProxy both run: 12.0, by what `Serve` calls: proxy.parseInnerOnce 8.0, itself 1.0, x 3.0",
		"The ReverseProxy: -1.0 (36.0 vs 37.0)", "per request): +0.0, of which timers +3.0", "is 8.0 of the handler's own"} {
		if !strings.Contains(out, s) {
			t.Errorf("the allocation limits do not say %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "(`get`)") {
		t.Errorf("a body without profiles is explained:\n%s", out)
	}
}
