package main

import (
	"context"
	"os/exec"
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
var profileFuncs = []profileShare{
	{Key: "verify", What: "client-certificate chain verification (authentication)", Func: "crypto/x509.(*Certificate).Verify"},
	{Key: "verifier", What: "of which the request-header (front-proxy) verifier", Func: "k8s.io/apiserver/pkg/authentication/request/x509.(*Verifier).AuthenticateRequest"},
	{Key: "serve", What: "the proxy handler, including the upstream round trip", Func: "github.com/clustergateway/cluster-gateway/pkg/proxy.(*Proxy).serve"},
	{Key: "acquire", What: "of which Pool.Acquire", Func: "github.com/clustergateway/cluster-gateway/pkg/pool.(*Pool).Acquire"},
	{Key: "gc", What: "garbage collection (background marking)", Func: "runtime.gcBgMarkWorker"},
}

// profileBreakdown reads cumulative percentages with `go tool pprof -top -cum`.
func profileBreakdown(ctx context.Context, goBin, path string) ([]profileShare, error) {
	out, err := exec.CommandContext(ctx, goBin, "tool", "pprof", "-top", "-cum", "-nodecount=100000", "-nodefraction=0", "-edgefraction=0", path).Output()
	if err != nil {
		return nil, err
	}
	cum := map[string]float64{}
	for _, line := range strings.Split(string(out), "\n") {
		// flat flat% sum% cum cum% name
		f := strings.Fields(line)
		if len(f) < 6 || !strings.HasSuffix(f[4], "%") {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSuffix(f[4], "%"), 64); err == nil {
			cum[strings.Join(f[5:], " ")] = v
		}
	}
	shares := make([]profileShare, len(profileFuncs))
	copy(shares, profileFuncs)
	for i := range shares {
		shares[i].Pct = cum[shares[i].Func]
	}
	return shares, nil
}
