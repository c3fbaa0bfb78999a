package main

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

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

// pathProfile is the gateway's CPU profile during one load (or idle).
type pathProfile struct {
	Key, What, Path string
	// Top is `go tool pprof -top` of the profile, its first topFuncs
	// functions by their own CPU: pprof's names, none chosen by the bench.
	Top string
}

// topFuncs is how many functions of each profile the report lists.
const topFuncs = 10

// readProfiles reads the profiles runLoads wrote for the loads in ts; one
// that pprof cannot read is listed without its top.
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
		top, err := pprofTop(ctx, goBin, "-nodecount="+strconv.Itoa(topFuncs), path)
		if err != nil {
			logf("cannot read the gateway profile %s: %v", path, err) // listed without its top
		}
		out = append(out, pathProfile{Key: pl.Key, What: pl.What, Path: path, Top: top})
	}
	return out
}

// pprofTop is `go tool pprof -top` with args, without pprof's header lines
// that name the file, build and time.
func pprofTop(ctx context.Context, goBin string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, goBin, append([]string{"tool", "pprof", "-top"}, args...)...).Output()
	if err != nil {
		return "", err
	}
	var keep []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(l, "File:") || strings.HasPrefix(l, "Build ID:") || strings.HasPrefix(l, "Type:") || strings.HasPrefix(l, "Time:") {
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "\n"), nil
}
